"""The runnable examples in the docstrings stay correct."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["daydream", "daydream.model", "daydream.errors", "daydream.primitives", "daydream.device", "daydream.published", "daydream.heapmode",
           "daydream.loader.io", "daydream.loader.kineto", "daydream.loader.layers", "daydream.loader.shapes",
           "daydream.graph.graph", "daydream.sim.result", "daydream.plots", "daydream.optimizations",
           "daydream.optimizations.data_parallel", "daydream.optimizations.tensor_parallel",
           "daydream.optimizations.ptdp", "daydream.optimizations.device", "daydream.optimizations.amp",
           "daydream.optimizations.fusion", "daydream.opbench", "daydream.optimizations._stragglers", "daydream.optimizations._landing",
           "daydream.loader.fast", "daydream.fileio", "daydream.collect.runner", "daydream.collect.heap",
           "daydream.collect.shapes", "daydream.loader.iterations", "daydream.calibrate", "daydream.calibrate_procs",
           "daydream.calibrate_p2p", "daydream.calibrate_handover", "daydream.optimizations._handover_now",
           "daydream.overhead", "daydream.calibrate_corun", "daydream.optimizations._optstep", "daydream.corelink",
           "daydream.validate", "daydream.validation.turns"]
# hfta, hydra, pipeline, tessel and _schedules run their examples in their own test files


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    import matplotlib

    matplotlib.use("Agg")
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0
    assert res.attempted > 0 or name in ("daydream.errors",)
