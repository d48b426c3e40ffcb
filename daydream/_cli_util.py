"""Shared by the CLI modules (kept apart from ``daydream.cli`` to avoid import cycles)."""
from __future__ import annotations

import functools
import sys

import click

from .errors import DaydreamError

__all__ = ["handle_errors"]


def handle_errors(fn):
    """Decorator: turn :class:`DaydreamError` into ``error: ...`` and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DaydreamError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)

    return wrapper
