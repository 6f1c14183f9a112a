"""The bisect journal: append-only JSON lines of every environment, launch and decision.

Each line is written and fsynced as it happens (regdiag.records.append_jsonl), so kill -9 at any
moment loses at most the launch that was running. `--resume` reads the journal back and the search
runs again from the start: every launch the journal holds is reused (the search asks for "the
first n launches of this point", and the journal has them), so it takes the same path, reaches the
same answer and measures no launch twice. Decisions recomputed on resume are checked against the
journaled ones rather than written again.

A journal is a record: a file someone else may have written. `--resume` refuses one owned by another
user or writable by others (check_writer), and takes the options that choose code (CODE_INPUTS: the
command, setup, interpreter, checkout, package sources, probe options) and the sides' variables from
it only when its start line's start_hash verifies under this home's key, i.e. this user's regdiag wrote
it (unverified); otherwise they are given again, or the sides held to the rule of records
(regdiag.bisect.factors), unless --allow-code-from-record.

Lines (all carry "type"):
  start     schema "regdiag.journal/1", the inputs and their hash, the sides as given (--good, --bad,
            --ignore, --only: what `--resume --journal J` alone reads), and start_hash: a keyed hash
            (this home's snapshot.key) of the whole line; the first line
  env       one point's environment: built (key, seconds, cached) or skip (reason)
  launch    one launch of one point: index, status, medians per metric (ms), cycles, seconds
  decision  one classification: seq, what, verdict, theta with its CI, launches used
  fault     a launch lost to its lane (a node gone DOWN, a cancelled step): point, index, lane, what;
            not the point's launch (that index is run again on another lane)
  end       the result, when a run finishes (a resumed run may add another)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from regdiag.bisect.measure import Launch
from regdiag.errors import BadInput
from regdiag.files import not_own_file, open_appending
from regdiag.records import (
    JOURNAL,
    FileLock,
    RecordError,
    append_jsonl,
    check_schema,
    json_line,
    read_jsonl_numbered,
    schema_id,
)
from regdiag.runs import now_iso, regdiag_home
from regdiag.snapshot.keyedhash import signature
from regdiag.snapshot.redact import default_key, redact_spec, redact_tree, redact_value

SCHEMA = schema_id(JOURNAL)
START_HASH = "start_hash"
# The inputs (Request.inputs) that choose code a resume runs: what runs, in what interpreter, from which
# checkout and package sources; the probe's options (an engine's --launch-cmd). Taken from a journal only
# when it is this user's own (unverified is None) or with --allow-code-from-record.
CODE_INPUTS = ("command", "setup", "python", "repo", "find_links", "index_url", "probe_args")


def inputs_hash(inputs: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


def default_path() -> Path:
    """$REGDIAG_HOME/bisect/<time>-<pid><4 hex>.jsonl: two bisects started in one second (on one host or
    two sharing a REGDIAG_HOME) get two journals, where the time alone gave them one."""
    import secrets

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    d = regdiag_home() / "bisect"
    while True:
        p = d / f"{stamp}-{os.getpid()}{secrets.token_hex(2)}.jsonl"
        if not os.path.lexists(p):
            return p


def _drop_torn_tail(path: Path) -> None:
    """Cut a half-written last line (kill -9 inside a write) so the next append starts a clean line."""
    with os.fdopen(open_appending(path), "rb+") as f:  # O_NOFOLLOW: never cuts a file a link points to
        f.seek(0, 2)
        size = f.tell()
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())


def _recorded_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs as the journal keeps them: the values of variables (the factors' sides, the ones held
    fixed) as the screen shows them (redact_value: default-deny, a keyed hash unless harmless by shape),
    everything else through redact_tree. The journal's inputs_hash is of the inputs as given."""
    out = dict(inputs)
    out["factors"] = [
        {
            **f,
            **{
                s: redact_value(str(f.get("name")), f[s])[0]
                for s in ("good", "bad")
                if isinstance(f.get(s), str)
            },
        }
        if isinstance(f, dict) and f.get("kind") == "env"
        else f
        for f in out.get("factors") or []
    ]
    fixed = out.get("fixed_env")
    if isinstance(fixed, dict):
        out["fixed_env"] = {n: v if v is None else redact_value(str(n), str(v))[0] for n, v in fixed.items()}
    return redact_tree(out)


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _recorded_sides(sides: Mapping[str, Any]) -> dict[str, Any]:
    """--good/--bad (ab: --a/--b) as the journal keeps them: each NAME=VALUE as the screen shows it. A
    value hidden here cannot be read back: `--resume --journal J` then needs the sides given again."""
    out = {k: redact_spec(v) if k in ("good", "bad") and isinstance(v, str) else v for k, v in sides.items()}
    return redact_tree(out)


def _checked(ev: dict[str, Any], metric: object = None) -> dict[str, Any]:
    """One journal line, its types and values checked (a resumed search trusts every number in it): a
    launch that measured (status ok) has a median of the bisected `metric`."""
    kind = ev.get("type")
    if kind not in ("start", "env", "launch", "decision", "end", "fault"):
        raise ValueError(f"unknown line type {kind!r}")
    if kind in ("env", "launch", "fault") and not isinstance(ev.get("point"), str):
        raise ValueError(f"a {kind} line without a point")
    if kind == "launch":
        index = ev.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"launch index {index!r} is not a count")
        meds = ev.get("medians")
        if not isinstance(meds, dict):
            raise ValueError("launch medians is not an object")
        for name, v in meds.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"launch median {name!r} is {v!r}, not a finite positive number")
        if ev.get("status", "ok") == "ok" and (not meds or (isinstance(metric, str) and metric not in meds)):
            raise ValueError(f"a measured launch without a median of {metric or 'any metric'}")
        for key, typ in (("cycles", int), ("duration_s", (int, float)), ("returncode", int)):
            v = ev.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, typ)):
                raise ValueError(f"launch {key} is {v!r}, not a number")
    if kind == "env" and ev.get("build_s") is not None:
        b = ev["build_s"]
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
            raise ValueError(f"env build_s is {b!r}, not a number")
    if kind == "decision" and not (isinstance(ev.get("what"), str) and isinstance(ev.get("verdict"), str)):
        raise ValueError("a decision line without what and verdict")
    return ev


def start_hash(line: Mapping[str, Any], key: bytes) -> str:
    """The keyed hash of a start line as read back (every field but start_hash itself)."""
    body = {k: v for k, v in line.items() if k != START_HASH}
    return signature(key, "bisect journal start line", json.dumps(body, sort_keys=True).encode("utf-8"))


def _start_line(inputs: Mapping[str, Any], digest: str, sides: Mapping[str, Any]) -> dict[str, Any]:
    line = {
        "type": "start",
        "schema": SCHEMA,
        "created": now_iso(),
        "inputs": _recorded_inputs(inputs),
        "inputs_hash": digest,
        "sides": _recorded_sides(sides),  # what `--resume --journal J` alone reads
    }
    key = default_key()
    if key is not None:  # hashed as it will be read back: the JSON that append_jsonl writes
        line[START_HASH] = start_hash(json.loads(json_line(line)), key)
    return line


def unverified(head: Mapping[str, Any]) -> str | None:
    """Why a start line is not known to be one this user's regdiag wrote, or None when its start_hash
    verifies under this home's key."""
    got = head.get(START_HASH)
    if not isinstance(got, str):
        return "its start line has no start_hash (a journal written before it was kept, or elsewhere)"
    key = default_key()
    if key is None or not hmac.compare_digest(got, start_hash(head, key)):
        return "its start line does not match its start_hash (edited, or written under another REGDIAG_HOME)"
    return None


def check_writer(path: Path, allow_code: bool) -> None:
    """A journal owned by another user, or writable by others, is refused for --resume in one line
    unless `allow_code` (--allow-code-from-record): what it says would run, and be believed."""
    try:
        st = os.stat(path)
    except OSError:
        return  # a missing or unreadable journal is said by its reader
    why = not_own_file(st)
    if why and not allow_code:
        raise BadInput(
            f"{path}: {why}; a journal chooses what a resume runs (its command, setup, python and "
            "sides) and what it concludes: pass --allow-code-from-record if you trust it"
        )


def read_start(path: Path, allow_code: bool = False) -> dict[str, Any]:
    """The start line of the journal at `path` (for `--resume --journal J` alone: its "inputs" and
    "sides" are the options to continue with); BadInput in one line when there is none, or when another
    user may have written the file (check_writer)."""
    check_writer(Path(path), allow_code)
    try:
        numbered = read_jsonl_numbered(Path(path))
    except RecordError as e:
        raise BadInput(str(e)) from None
    head = numbered[0][1] if numbered else {}
    if head.get("type") != "start" or not str(head.get("schema", "")).startswith(f"regdiag.{JOURNAL}/"):
        raise BadInput(f"{path}: --resume: not a regdiag bisect journal ({SCHEMA})")
    return head


class Journal:
    def __init__(
        self,
        path: Path,
        inputs: Mapping[str, Any],
        resume: bool,
        sides: Mapping[str, Any] | None = None,
        allow_code: bool = False,  # --allow-code-from-record: resume a journal another user may have written
    ) -> None:
        self.path = Path(path)
        if resume:
            check_writer(self.path, allow_code)
        self._sides = dict(sides or {})
        self.later: dict[str, dict[int, Launch]] = {}  # launches after a gap in a point's indexes
        self.faults: list[dict[str, Any]] = []  # launches lost to their lane
        try:
            # Held until this process ends: a second bisect (or --resume) on this journal would
            # interleave its lines with ours and leave a journal that cannot be resumed.
            self._lock = FileLock(self.path, "this bisect journal")
        except RecordError as e:
            raise BadInput(str(e)) from None
        try:
            self._open(inputs, resume)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, inputs: Mapping[str, Any], resume: bool) -> None:
        try:
            numbered = read_jsonl_numbered(self.path)
        except RecordError as e:
            raise BadInput(str(e)) from None
        events = [ev for _, ev in numbered]
        digest = inputs_hash(inputs)
        if events and not resume:
            raise BadInput(
                f"{self.path}: journal already exists; pass --resume to continue it, or give another --journal"
            )
        if resume and not events:
            raise BadInput(f"{self.path}: --resume: no journal to resume here")
        # Each point's launches from 0 up to the first missing one; those after a gap wait in `later`.
        self.launches: dict[str, list[Launch]] = {}
        # Launches taken by another run and written in as a point's first ones (bisect's seeded
        # endpoints): the search counts them as already used, so a fresh measurement starts after them.
        self.seeded: dict[str, int] = {}
        self.env_skip: dict[str, str] = {}
        self.decisions: list[dict[str, Any]] = []
        self.mismatches: list[str] = []
        self.resumed = bool(events)
        self.measured_s = 0.0
        if events:
            head = events[0]
            if head.get("type") != "start" or not str(head.get("schema", "")).startswith(
                f"regdiag.{JOURNAL}/"
            ):
                raise BadInput(f"{self.path}: not a regdiag bisect journal ({SCHEMA})")
            try:  # read by major version: a newer one is refused with "upgrade", not as "not a journal"
                check_schema(head["schema"], str(self.path), (JOURNAL,))
            except RecordError as e:
                raise BadInput(str(e)) from None
            head_inputs = head.get("inputs") if isinstance(head.get("inputs"), dict) else {}
            if head.get("inputs_hash") != digest:
                changed = _changed(head_inputs, _recorded_inputs(inputs))
                raise BadInput(
                    f"{self.path}: --resume with different inputs than the journal was started with "
                    f"({', '.join(changed) or 'unknown'}); resume with the same options"
                )
            for n, ev in numbered[1:]:
                try:
                    self._load(_checked(ev, head_inputs.get("metric")))
                except (BadInput, KeyError, TypeError, ValueError) as e:
                    why = f"no {e}" if isinstance(e, KeyError) else str(e)
                    raise BadInput(
                        f"{self.path}: line {n}: {why}; the journal is damaged (fix or remove that line to resume)"
                    ) from None
            _drop_torn_tail(self.path)
        else:
            # makes a missing directory only inside REGDIAG_HOME (records.check_output_path)
            append_jsonl(self.path, _start_line(inputs, digest, self._sides))
        self.old_decisions = len(self.decisions)
        self._seq = 0

    def _load(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "launch":
            self._keep(str(ev["point"]), int(ev["index"]), Launch.from_dict(ev))
            self.measured_s += float(ev.get("duration_s") or 0.0)
            if ev.get("source"):
                self.seeded[str(ev["point"])] = self.seeded.get(str(ev["point"]), 0) + 1
        elif kind == "env":
            if ev.get("status") == "skip":
                self.env_skip[str(ev["point"])] = str(ev.get("reason"))
            self.measured_s += float(ev.get("build_s") or 0.0)
        elif kind == "decision":
            self.decisions.append(ev)
        elif kind == "fault":
            self.faults.append(ev)

    def _keep(self, point: str, index: int, launch: Launch) -> None:
        """Launch `index` of `point`, in its place: after the ones before it, or waiting for them."""
        lst = self.launches.setdefault(point, [])
        later = self.later.setdefault(point, {})
        if index < len(lst) or index in later:
            raise BadInput(f"launch {index} of point {point} is there twice")
        later[index] = launch
        while len(lst) in later:
            lst.append(later.pop(len(lst)))

    def has(self, point: str, index: int) -> bool:
        """Whether launch `index` of `point` is kept (in order, or after a gap)."""
        return index < len(self.launches.get(point, [])) or index in self.later.get(point, {})

    # -- writing ---------------------------------------------------------------------------------

    def _append(self, line: dict[str, Any]) -> None:
        # Spec values, held-fixed env values, --command/--setup and stderr reasons can all carry secrets.
        append_jsonl(self.path, redact_tree(line))

    def launch(self, point: str, index: int, launch: Launch, label: str, source: str | None = None) -> None:
        line = {"type": "launch", "point": point, "index": index, "label": label, **launch.to_dict()}
        if source:
            line["source"] = source
            self.seeded[point] = self.seeded.get(point, 0) + 1
        self._append(line)
        self._keep(point, index, launch)
        self.measured_s += launch.duration_s

    def fault(self, record: dict[str, Any]) -> None:
        """A launch lost to its lane (bisect/rounds.py): kept for the report, not as the point's launch."""
        line = {"type": "fault", **record}
        self._append(line)
        self.faults.append(line)

    def env(self, point: str, record: dict[str, Any]) -> None:
        self._append({"type": "env", "point": point, **record})
        if record.get("status") == "skip":
            self.env_skip[point] = str(record.get("reason"))
        self.measured_s += float(record.get("build_s") or 0.0)

    def decision(self, record: dict[str, Any]) -> None:
        """Write a decision, or, while replaying a resumed journal, check it against the journaled one."""
        seq = self._seq
        self._seq += 1
        line = {"type": "decision", "seq": seq, **record}
        if seq < self.old_decisions:
            old = self.decisions[seq]
            if (old.get("what"), old.get("verdict")) != (line.get("what"), line.get("verdict")):
                self.mismatches.append(
                    f"decision {seq}: journal says {old.get('what')}: {old.get('verdict')}, "
                    f"now {line.get('what')}: {line.get('verdict')}"
                )
            return
        self._append(line)
        self.decisions.append(line)

    def close(self) -> None:
        """Let another Journal (a --resume) open this file; the process ending does the same."""
        self._lock.release()

    def end(self, result: dict[str, Any]) -> None:
        self._append({"type": "end", "finished": now_iso(), "result": result})
