"""Processes of one job on one CPU host's cores: how fast their compute runs beside each other.

Data-parallel workers and pipeline stages on a CPU host share its last-level
cache and memory bandwidth.  :func:`corun_rate` gives the speed of the
traced work with a second process busy on another core, relative to alone,
from one of two measurements (``source``):

* ``"trace"``: one traced iteration's compute ops (at the batch the ranks
  will run) re-run beside a twin replaying them on another core
  (:func:`daydream.opseq.sequence_corun`), once per process and sequence,
  so that predictions from one trace agree; where that cannot be measured
  (no shapes, one core, no torch), the profile's figure;
* ``"profile"``: the device profile's ``corun`` (a 1-thread matmul beside a
  matmul, measured by ``daydream calibrate``);
* ``"off"``: 1.

On this VM the matmul probe read 0.99 while the pipeline validation's
micro-batch sequence ran at 0.93-0.96 beside its twin (0.81-0.93 in a noisier
hour), the size of the 2-process rows' under-prediction.  The VM also has
spells of a second or more in which two busy cores run at 0.55-0.7x each;
a measurement made back to back fell mostly in one about one time in five,
so both measurements spread their rounds over seconds
(:func:`daydream.opseq.corun_rounds`).
"""
from __future__ import annotations

__all__ = ["corun_rate", "SOURCES"]

#: Where :func:`corun_rate` takes the rate from.
SOURCES = ("trace", "profile", "off")
_MEASURED: dict = {}


def corun_rate(ctx, batch_factor: float = 1.0, source: str = "trace") -> float:
    """Speed of the traced work beside a second busy process on another core, relative to alone (<= 1).

    ``batch_factor``: the ranks run the traced ops at this multiple of the
    traced batch (a pipeline's micro-batch: ``1 / M``).  1.0 off CPU.
    """
    dev = ctx.device
    if dev.kind != "cpu" or source == "off":
        return 1.0
    if source == "trace":
        measured = _measured(ctx, batch_factor)
        if measured is not None:
            return measured
    return float(dev.corun)


def _measured(ctx, batch_factor: float):
    from daydream.opseq import sequence_corun

    from .batch_size import sequence_at

    key = (tuple(sequence_at(ctx, batch_factor)), ctx.device.threads or None)
    if not key[0]:
        return None
    if key not in _MEASURED:
        try:
            _MEASURED[key] = sequence_corun(list(key[0]), key[1])
        except ImportError:          # no torch here
            _MEASURED[key] = None
    return _MEASURED[key]
