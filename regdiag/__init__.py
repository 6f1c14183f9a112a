"""regdiag: find out why tokens per second dropped."""

from typing import Any

from regdiag.version import __version__

__all__ = ["__version__", "frame"]


def frame(*runs: Any, labels: Any = None) -> Any:
    """Run records as one tidy pandas DataFrame: one row per run, launch, metric and sample, with units,
    directions and labels (regdiag.dataframe; docs/records.md, "As a DataFrame")."""
    from regdiag.dataframe import frame as _frame

    return _frame(*runs, labels=labels)
