"""Shared by the CLI modules (kept apart from ``daydream.cli`` to avoid import cycles)."""
from __future__ import annotations

import functools
import os
import sys

import click

from .errors import DaydreamError, one_line

__all__ = ["handle_errors", "debugging", "one_line", "internal_error_exit", "quiet_kineto", "DEBUG_ENV",
           "INTERNAL_ERROR_STATUS", "KINETO_QUIET_LEVEL"]

#: Set to 1 to get the full traceback of an unexpected error instead of one line.
DEBUG_ENV = "DAYDREAM_DEBUG"
#: Exit status of an unexpected error (a bug in daydream): not 2, which means bad input.
INTERNAL_ERROR_STATUS = 3


#: ``KINETO_LOG_LEVEL`` that silences Kineto's logger: torch 2.13's Kineto prints a ``USDT:`` line at
#: every profiler start and stop at levels up to 5 (measured), 192 lines in one ``daydream
#: validate`` run, from the profiler sessions calibration times its figures under.
KINETO_QUIET_LEVEL = "6"


def quiet_kineto() -> None:
    """Silence Kineto's log in this process and its children, unless the user set ``KINETO_LOG_LEVEL``.

    Kineto reads the variable when torch is imported, so this must run before that.
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET_LEVEL)


def debugging() -> bool:
    """Whether ``DAYDREAM_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "0") not in ("", "0")


def internal_error_exit(what: str) -> None:
    """One line saying ``what`` failed by a bug and how to get the traceback; exit 3."""
    click.echo(f"error: internal error ({what}); please report it, with the traceback from {DEBUG_ENV}=1", err=True)
    sys.exit(INTERNAL_ERROR_STATUS)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def handle_errors(fn):
    """Decorator: :class:`DaydreamError` becomes ``error: ...`` and exit 2; Ctrl-C exit 130.

    A reader that closed the output early (``daydream info T | head``) ends the
    command quietly, exit 141 as a process killed by SIGPIPE would.  Any other
    exception is a bug in daydream: one line naming it and how to get the
    traceback (``DAYDREAM_DEBUG=1``), exit 3.
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
        except BrokenPipeError:
            _quiet_stdout()
            sys.exit(141)
        except (SystemExit, click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
            if debugging():
                raise
            internal_error_exit(one_line(exc))

    return wrapper
