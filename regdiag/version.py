"""The version of regdiag, in a module of its own that imports nothing (every module may read it)."""

__version__ = "0.1.0"
