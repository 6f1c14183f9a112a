"""Memory bandwidth for explain's floors: the probe's measured copy bandwidth, else the record's device
looked up in a small table, else an H200's; `--bandwidth` or `--gpu` override.

The table: datasheet memory bandwidth of each card, except the H200's, which is the device copy
bandwidth measured on one (4.24 TB/s against a datasheet 4.8: a floor should be reachable). Names are
matched by their words (case and `-` aside): an entry matches a name that holds all its words, the
entry of most words wins ("NVIDIA H100 PCIe" is the PCIe card, "NVIDIA A100-SXM4-40GB" the 40 GB one).
`--gpu` names one entry: exactly, by more words than an entry has, or by fewer when only one entry has
them; a name that several entries would fit ("A100": 40 or 80 GB) is refused, naming them.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from regdiag.errors import BadInput

# name: (bytes/s, where the number comes from)
GPUS: dict[str, tuple[float, str]] = {
    "H200": (4.24e12, "copy bandwidth measured on one H200 (datasheet 4.8 TB/s)"),
    "H100 PCIe": (2.0e12, "NVIDIA H100 PCIe datasheet"),
    "H100 NVL": (3.9e12, "NVIDIA H100 NVL datasheet"),
    "H100": (3.35e12, "NVIDIA H100 SXM datasheet"),
    "B200": (8.0e12, "NVIDIA B200 datasheet"),
    "RTX PRO 6000 Blackwell": (1.792e12, "NVIDIA RTX PRO 6000 Blackwell datasheet (GDDR7, 512-bit)"),
    "A100 80GB PCIe": (1.935e12, "NVIDIA A100 80GB PCIe datasheet"),
    "A100 80GB": (2.039e12, "NVIDIA A100 80GB SXM datasheet"),
    "A100 40GB PCIe": (1.555e12, "NVIDIA A100 40GB PCIe datasheet"),
    "A100 40GB": (1.555e12, "NVIDIA A100 40GB SXM datasheet"),
    "L40S": (8.64e11, "NVIDIA L40S datasheet"),
}
DEFAULT_GPU = "H200"
DEFAULT_BANDWIDTH = GPUS[DEFAULT_GPU][0]
MAX_BANDWIDTH = 1e15  # B/s; a floor needs a bandwidth a card could have


def _words(name: str) -> frozenset[str]:
    return frozenset(name.lower().replace("-", " ").replace("_", " ").split()) - {"nvidia", "tesla"}


def lookup(name: str) -> tuple[str, float, str] | None:
    """(table name, bytes/s, source) of the entry of most words that the device name holds all of."""
    have = _words(name)
    hits = [k for k in GPUS if _words(k) <= have]
    if not hits:
        return None
    key = max(hits, key=lambda k: len(_words(k)))
    return (key, *GPUS[key])


def gpu_bandwidth(name: str) -> tuple[float, str]:
    """--gpu NAME: its table entry; BadInput for a name the table does not hold, or one that several
    entries would fit (`A100`: the 40 and the 80 GB card differ by 30 %)."""
    have = _words(name)
    exact = [k for k in GPUS if _words(k) == have]
    wider = [k for k in GPUS if have < _words(k)]
    hit = lookup(name)
    if exact:
        key = exact[0]
    elif len(wider) > 1:
        raise BadInput(f"--gpu {name!r} fits {', '.join(wider)}; name one (or give --bandwidth)")
    elif wider:
        key = wider[0]
    elif hit is not None:
        key = hit[0]
    else:
        raise BadInput(
            f"unknown GPU {name!r}; the bandwidth table holds {', '.join(GPUS)} (or give --bandwidth)"
        )
    return GPUS[key][0], f"--gpu {key}: {GPUS[key][1]}"


def check_bandwidth(v: float | None) -> None:
    if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and 1e6 <= v <= MAX_BANDWIDTH):
        raise BadInput(f"bandwidth must be a number of bytes/s within 1e6..{MAX_BANDWIDTH:g} (got {v})")


def _device_names(launches: list[dict[str, Any]]) -> list[str]:
    names = []
    for la in launches:
        dev = (la.get("header") or {}).get("device") if isinstance(la.get("header"), dict) else None
        if isinstance(dev, dict) and dev.get("type") == "cuda" and isinstance(dev.get("name"), str):
            names.append(dev["name"])
    return names


def bandwidth_for(
    launches: list[dict[str, Any]], given: float | None, gpu: str | None = None
) -> tuple[float, str]:
    """The floor's bandwidth and its source: --bandwidth, --gpu, the probe's measured copy bandwidth, the
    record's device in the table, or the H200 default (said so)."""
    check_bandwidth(given)
    if given is not None:
        return float(given), "--bandwidth"
    if gpu:
        return gpu_bandwidth(gpu)
    raw = [(la.get("header") or {}).get("copy_GBps") for la in launches if isinstance(la.get("header"), dict)]
    measured = [float(x) for x in raw if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]
    if measured:
        return statistics.median(measured) * 1e9, "copy bandwidth measured by the probe on this device"
    for name in _device_names(launches):
        hit = lookup(name)
        if hit is not None:
            return hit[1], f"the record's device {name}: {hit[2]}"
    return DEFAULT_BANDWIDTH, f"default: {GPUS[DEFAULT_GPU][1]} (give --gpu or --bandwidth for another card)"
