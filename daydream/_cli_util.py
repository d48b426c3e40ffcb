"""Shared by the CLI modules (kept apart from ``daydream.cli`` to avoid import cycles)."""
from __future__ import annotations

import functools
import os
import sys

import click

from .errors import DaydreamError

__all__ = ["handle_errors", "DEBUG_ENV", "INTERNAL_ERROR_STATUS"]

#: Set to 1 to get the full traceback of an unexpected error instead of one line.
DEBUG_ENV = "DAYDREAM_DEBUG"
#: Exit status of an unexpected error (a bug in daydream): not 2, which means bad input.
INTERNAL_ERROR_STATUS = 3


def _one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}"[:500] if msg else type(exc).__name__


def handle_errors(fn):
    """Decorator: :class:`DaydreamError` becomes ``error: ...`` and exit 2; Ctrl-C exit 130.

    Any other exception is a bug in daydream: one line naming it and how to get
    the traceback (``DAYDREAM_DEBUG=1``), exit 3.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DaydreamError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except (SystemExit, click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
            if os.environ.get(DEBUG_ENV, "0") not in ("", "0"):
                raise
            click.echo(f"error: internal error ({_one_line(exc)}); please report it, with the traceback "
                       f"from {DEBUG_ENV}=1", err=True)
            sys.exit(INTERNAL_ERROR_STATUS)

    return wrapper
