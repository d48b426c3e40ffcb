"""Progress messages on stderr for long work, silent for short work.

A :class:`Progress` prints nothing during its first ``delay_s`` seconds, so
small inputs stay quiet and fast; after that it prints one line per update,
at most every ``every_s`` seconds.  It writes only when stderr is a terminal,
or when ``DAYDREAM_PROGRESS=1`` (``=0`` silences it everywhere).

Examples
--------
>>> p = Progress("loading", total=3, stream=None)
>>> for _ in range(3):
...     p.step()
>>> p.done
3
"""
from __future__ import annotations

import os
import sys
import time

__all__ = ["Progress", "Stages", "progress_enabled"]


def progress_enabled(stream=None) -> bool:
    """Whether progress lines should be written to ``stream`` (default stderr)."""
    flag = os.environ.get("DAYDREAM_PROGRESS")
    if flag is not None and flag != "":
        return flag not in ("0", "false", "no")
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Count work done and report it after a delay.

    Parameters
    ----------
    label : str
        What is being done ("loading traces").
    total : int, optional
        Units of work expected (shown as ``done/total``).
    unit : str
        Name of one unit ("files", "tasks").
    delay_s, every_s : float
        Quiet period before the first line; minimum time between lines.
    stream : file, optional
        Where to write; ``None`` disables output (counting still works).
    """

    def __init__(self, label: str, total: int | None = None, unit: str = "", *, delay_s: float = 2.0,
                 every_s: float = 1.0, stream="stderr"):
        self.label, self.total, self.unit = label, total, unit
        self.delay_s, self.every_s = delay_s, every_s
        self.stream = sys.stderr if stream == "stderr" else stream
        self.enabled = self.stream is not None and progress_enabled(self.stream)
        self.t0 = time.monotonic()
        self._last = self.t0
        self._printed = False
        self.done = 0

    def step(self, n: int = 1, note: str = "") -> None:
        """Record ``n`` more units done; maybe print a line."""
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.t0 < self.delay_s or (self._printed and now - self._last < self.every_s):
            return
        self._last, self._printed = now, True
        of = f"/{self.total}" if self.total is not None else ""
        extra = f" {note}" if note else ""
        self.stream.write(f"{self.label}: {self.done}{of} {self.unit} ({now - self.t0:.0f} s){extra}\n")
        self.stream.flush()

    def finish(self, note: str = "") -> None:
        """Print a closing line if anything was printed before."""
        if self.enabled and self._printed:
            self.stream.write(f"{self.label}: done, {self.done} {self.unit} in "
                              f"{time.monotonic() - self.t0:.1f} s{(' ' + note) if note else ''}\n")
            self.stream.flush()


class Stages:
    """Announce the stages of a pipeline once it has become slow.

    ``enter(name)`` prints ``label: name...`` only when the work so far took
    longer than ``delay_s`` (so a replay of a small trace prints nothing),
    and ``finish()`` prints the total time if anything was printed.

    >>> st = Stages("replay", stream=None); st.enter("simulating"); st.finish()
    """

    def __init__(self, label: str, *, delay_s: float = 2.0, stream="stderr"):
        self.label, self.delay_s = label, delay_s
        self.stream = sys.stderr if stream == "stderr" else stream
        self.enabled = self.stream is not None and progress_enabled(self.stream)
        self.t0 = self._t = time.monotonic()
        self._printed = False

    def enter(self, name: str) -> None:
        """Start stage ``name`` (announced if the previous ones were slow)."""
        now = time.monotonic()
        if self.enabled and now - self.t0 >= self.delay_s:
            self.stream.write(f"{self.label}: {name}... ({now - self.t0:.0f} s so far)\n")
            self.stream.flush()
            self._printed = True
        self._t = now

    def finish(self) -> None:
        if self.enabled and self._printed:
            self.stream.write(f"{self.label}: done in {time.monotonic() - self.t0:.1f} s\n")
            self.stream.flush()
