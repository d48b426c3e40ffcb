"""Simulation of dependency graphs."""
from .core import Timeline, simulate_times
from .result import IterationTimes, SimResult, mean_iteration_ns, simulate

__all__ = ["simulate", "simulate_times", "SimResult", "IterationTimes", "Timeline", "mean_iteration_ns"]
