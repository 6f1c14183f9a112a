"""Other tools' result files, read as run records (regdiag.run/1): one module per format.

Wherever a run is loaded for comparison (`compare`, `explain`, `baseline save`: through
`load_run`), a file that is not a regdiag record is offered to the importers. The first whose
`sniff` claims it parses it; `--from NAME` (or `load_run(path, fmt=NAME)`) skips the sniffing.

An importer is a module here with:

    NAME: str                 the name `--from` takes ("pyperf")
    TITLE: str                one line for help and errors ("pyperf JSON (pyperf run -o, Runner -o)")
    def sniff(text: str) -> bool
        Claim a file from its first SNIFF_CHARS characters (decoded text; gzip is undone first).
        Cheap and certain: look for the format's own markers, never try a full parse.
    def parse(text: str, source: str) -> list[dict]
        The whole file as one or more run records, or BadInput naming `source` in one line.

and one line in IMPORTERS below. A record an importer returns is an ordinary run record (docs/records.md),
so nothing downstream knows where it came from. It must carry:

- `kind` "import", `probe.name` (the tool: "pyperf"), `probe.config` (what must match for two files
  to be comparable, no more), `primary` (None for a sweep of independent metrics), `phases` ([] unless
  the file has parts of a sum);
- `units` and `better` for every metric (`direction.declare`): the unit the tool wrote, values as
  written; `import_text` converts them to one unit per dimension (regdiag/units.py: times in ms);
- launches as the tool ran processes: one launch per process the tool started, its samples that
  process's values (a launch is the unit of evidence; see docs/statistics.md);
- `imported`: {"format": NAME, "source": the file, "tool_version": ... where the file says};
- `select`: the name that picks this record out of a file that holds several (`FILE#NAME`);
- optionally `probe.measures`: the measurement it is another instrument of (nccl-tests: "collectives",
  so its records compare with `probe collectives` records on the config keys both hold).

Importers are library code: standard library (and numpy) only, no typer, no rich, no I/O beyond what
`load_run` hands them. Adding one is one new file plus one line here (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

from regdiag import units
from regdiag.errors import BadInput
from regdiag.records import MAX_RECORD_BYTES, RUN, RecordError, check_record, load_record, read_regular
from regdiag.runs import new_run
from regdiag.snapshot.redact import scrub_record

# NAME -> module. Sniffed in this order; a format whose markers are a subset of another's goes after it.
IMPORTERS: dict[str, str] = {
    "pyperf": "regdiag.importers.pyperf",
    "hyperfine": "regdiag.importers.hyperfine",
    "nccl-tests": "regdiag.importers.nccl_tests",
    "nsys": "regdiag.importers.nsys",
    "vllm-bench": "regdiag.importers.vllm_bench",
    "sglang-bench": "regdiag.importers.sglang_bench",
    "torch-trace": "regdiag.importers.torch_trace",
}

IMPORT_KIND = "import"
SNIFF_CHARS = 65536
# What a record without `probe.measures` measures, when it is not its probe's name: records of these
# two instruments of one served engine were written before `measures` existed (2026-12-01).
_MEASURES_BEFORE_THE_FIELD = {"server": "served-itl", "ingest-log": "served-itl"}


def importer(name: str) -> ModuleType:
    if name not in IMPORTERS:
        raise BadInput(f"--from {name!r}: known formats are {', '.join(IMPORTERS)}")
    return importlib.import_module(IMPORTERS[name])


def formats() -> list[str]:
    return list(IMPORTERS)


def measures(probe: dict[str, Any]) -> str:
    """What a run's probe measures: two runs of different probes that measure the same thing (a server
    log and a live server; nccl-tests and `probe collectives`) are compared on the config keys both hold."""
    name = str(probe.get("name"))
    return str(probe.get("measures") or _MEASURES_BEFORE_THE_FIELD.get(name) or name)


def sniff(text: str) -> str | None:
    """The first importer that claims this text, or None."""
    head = text[:SNIFF_CHARS]
    for name in IMPORTERS:
        if importer(name).sniff(head):
            return name
    return None


def read_text(path: Path) -> str:
    """A file's text, gunzipped if it is gzip (pyperf writes .json.gz), or BadInput in one line."""
    try:
        raw = read_regular(path, MAX_RECORD_BYTES, "result file")
    except RecordError as e:
        raise BadInput(str(e)) from None
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip(raw, path, MAX_INFLATED_BYTES)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not a text file (not UTF-8)") from None


# Another tool's result file, decompressed: pyperf's largest are a few MB. Inflated in steps of at most
# this much more than is kept, so a gzip bomb (6 MB that inflate to 6 GiB) stops at the cap.
MAX_INFLATED_BYTES = 64 << 20


def gunzip(raw: bytes, path: Path, cap: int = MAX_INFLATED_BYTES) -> bytes:
    """gzip undone with a cap on what it inflates to (BadInput in one line beyond it, or when damaged)."""
    d = zlib.decompressobj(wbits=31)
    out: list[bytes] = []
    size = 0
    try:
        data = raw
        while data and not d.eof:
            chunk = d.decompress(data, cap + 1 - size)
            out.append(chunk)
            size += len(chunk)
            if size > cap:
                raise BadInput(
                    f"{path}: inflates to more than {cap >> 20} MiB; regdiag reads result files up to that "
                    "(a gzip bomb, or not a result file)"
                )
            data = d.unconsumed_tail
        if not d.eof:
            raise BadInput(f"{path}: gzip file that cannot be read (it ends early)")
    except zlib.error as e:
        raise BadInput(f"{path}: gzip file that cannot be read ({e})") from None
    return b"".join(out)


def split_selector(ref: str) -> tuple[str, str | None]:
    """'hf.json#fast' -> ('hf.json', 'fast'); a path without '#' (or one that exists with it) is whole."""
    base, sep, sel = ref.rpartition("#")
    if not sep or not base or Path(ref).exists():
        return ref, None
    return base, sel


def load_run(path: Path, fmt: str | None = None, select: str | None = None) -> dict[str, Any]:
    """One run record from a file: a regdiag record, or another tool's file read by its importer.

    A regdiag record is read (and refused) exactly as `records.load_record` does; only a file that is
    not one is offered to the importers, and when none claims it the record's own refusal stands.
    `select` picks one record from a file that holds several (hyperfine: one per command)."""
    if fmt is None:
        try:
            run = load_record(path, RUN)
        except RecordError as e:
            if not _not_a_record(str(e)):
                raise BadInput(str(e)) from None
            refusal = str(e)
        else:
            if select is not None:
                raise BadInput(f"{path}#{select}: a regdiag record holds one run; drop '#{select}'")
            return scrub_record(run)  # a record written before every field was scrubbed shows none either
    text = read_text(path)
    if fmt is None and sniff(text) is None:
        raise BadInput(f"{refusal} (nor a file regdiag imports: {', '.join(IMPORTERS)})")
    return pick(import_text(text, str(path), fmt), str(path), select)


def _not_a_record(message: str) -> bool:
    """Whether load_record refused the file for not being a record at all (so an importer may claim it)."""
    return any(m in message for m in ("not a regdiag record", "malformed JSON", "not UTF-8", "file is empty"))


def import_text(text: str, source: str, fmt: str | None = None) -> list[dict[str, Any]]:
    """Every run record another tool's file holds, checked as any record is."""
    name = fmt or sniff(text)
    if name is None:
        raise BadInput(
            f"{source}: neither a regdiag record nor a file regdiag can import "
            f"({', '.join(IMPORTERS)}; --from NAME to say which)"
        )
    # each importer declares the unit its tool wrote (pyperf's seconds, nsys' nanoseconds); a stored
    # or compared record holds one unit per dimension (regdiag/units.py: times in ms)
    # Every string of an imported record (hyperfine's command and parameter labels, nsys range and
    # kernel names, vllm-bench labels) through the one scrubber, as regdiag's own records are.
    records = [scrub_record(units.canonical(r)) for r in importer(name).parse(text, source)]
    if not records:
        raise BadInput(f"{source}: the {name} file holds no results")
    for r in records:
        try:
            check_record(r, f"{source} (imported as {name})", RUN)
        except RecordError as e:
            raise BadInput(str(e)) from None
    return records


def pick(records: list[dict[str, Any]], source: str, select: str | None) -> dict[str, Any]:
    names = [str(r.get("select")) for r in records]
    if select is None:
        if len(records) == 1:
            return records[0]
        raise BadInput(f"{source} holds {len(records)} results ({_listed(names)}): pick one as {source}#NAME")
    for r, n in zip(records, names, strict=True):
        if n == select:
            return r
    if select.isdigit() and int(select) < len(records):
        return records[int(select)]
    raise BadInput(f"{source}#{select}: no such result; the file holds {_listed(names)}")


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:6])
    return shown + (f", ... ({len(names)} in all)" if len(names) > 6 else "")


def new_import(
    fmt: str,
    source: str,
    *,
    tool: str,
    config: dict[str, Any],
    primary: str | None,
    select: str,
    tool_version: str | None = None,
) -> dict[str, Any]:
    """A run record for an importer to fill: kind "import", complete, no snapshots (the tool took none)."""
    run = new_run(
        kind=IMPORT_KIND,
        probe_name=tool,
        probe_version=str(tool_version or ""),
        config=config,
        primary=primary or "",
        phases=[],
    )
    run["primary"] = primary
    run["status"] = "complete"
    run["imported"] = {"format": fmt, "source": source, "tool_version": tool_version}
    run["select"] = select
    return run


def launch(index: int, samples: dict[str, list[float]], **extra: Any) -> dict[str, Any]:
    """One launch of an imported run: one process the tool ran."""
    la: dict[str, Any] = {
        "index": index,
        "status": "ok",
        "error": None,
        "started": None,
        "duration_s": None,
        "header": {},
        "warmup_dropped": 0,
        "samples": samples,
        "values": {},
        "scalars": {},
        "clocks": [],
        "footer": {},
    }
    la.update(extra)
    return la
