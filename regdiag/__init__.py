"""regdiag: find out why tokens per second dropped."""

__version__ = "0.1.0"
