"""daydream: predictive performance profiler for PyTorch training."""
__version__ = "0.1.0"
