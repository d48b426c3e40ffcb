"""Loaded by every Python process that ``daydream trace`` starts (it is first on PYTHONPATH).

Runs the site's own ``sitecustomize`` (if any) and then arms tracing when
``DAYDREAM_TRACE_CONFIG`` is set.  Never raises.
"""
import os
import sys


def _chain_original():
    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import sitecustomize  # noqa: F401  the site's own, if there is one
    except ImportError:
        pass
    except Exception as exc:  # pragma: no cover
        print(f"daydream: the site's sitecustomize failed: {exc}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


def _arm():
    if not os.environ.get("DAYDREAM_TRACE_CONFIG"):
        return
    try:
        from daydream.collect.runner import bootstrap

        bootstrap()
    except Exception as exc:
        print(f"daydream: tracing disabled: {exc}", file=sys.stderr)


_chain_original()
_arm()
