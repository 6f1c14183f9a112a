"""The --json outputs, as types: one TypedDict per schema id, each field with its meaning.

These types are what docs/schemas/*.schema.json are made from (`python -m regdiag.schemas`), and what
docs/records.md documents field by field. A field of a base class is always present; a field of a
`total=False` class may be left out. Every object may carry fields not named here (a minor version adds
fields; readers keep unknown ones). Nested parts that are records of their own (a snapshot, a run) or
that follow a table of their own in docs/ are typed `dict[str, Any]` here, and described in that doc.

Importing this module imports nothing else of regdiag."""

from typing import Annotated as D  # D[type, "what it means"]: the description goes into the schema
from typing import Any, Literal, TypedDict

Verdict = Literal["REGRESSED", "IMPROVED", "UNCHANGED", "INCONCLUSIVE"]

# ------------------------------------------------------------------------------- records and reports


class Snapshot(TypedDict):
    schema: D[str, "regdiag.snapshot/2"]
    created: D[str, "when it was taken, ISO 8601 with offset"]
    regdiag_version: D[str, "the regdiag that took it"]
    duration_s: D[float, "seconds the snapshot took"]
    origin: D[dict[str, Any], "where it was taken: host, target, pid (docs/snapshot.md)"]
    groups: D[dict[str, Any], "the fields by group: engine, packages, gpu, env, host (docs/snapshot.md)"]


class Launch(TypedDict):
    """One process of a run (docs/records.md, "Run records"): what it measured and how it ended."""

    index: D[int, "its place in the run"]
    status: D[Literal["ok", "error", "interrupted"], "ok, error (see error) or interrupted"]
    samples: D[dict[str, list[float | None]], "per-cycle series by metric, in the run's units"]


class Run(TypedDict):
    """A run record (regdiag.run/1): a probe's, a server's, a log's or another tool's file imported."""

    schema: D[str, "regdiag.run/1"]
    id: D[str, "the run id"]
    created: D[str, "when it started, ISO 8601"]
    status: D[Literal["running", "complete", "partial", "interrupted", "failed"], "how the run ended"]
    kind: D[str, "probe, server, engine, ingest-log, import, ..."]
    probe: D[dict[str, Any], "name, version, config (what must match for a comparison)"]
    primary: D[str | None, "the metric the verdict is of; null for a suite or sweep"]
    phases: D[list[str], "the parts of the primary's sum"]
    units: D[dict[str, str], "each metric's unit (times in ms once canonical)"]
    launches: D[list[Launch], "every launch, failed ones included"]


class SnapshotList(TypedDict):
    schema: D[str, "regdiag.snapshot-list/1"]
    snapshots: D[list[Snapshot], "one snapshot per --host, in the order given"]


class CheckReason(TypedDict):
    severity: D[str, "error (unfit) or warning"]
    group: D[str, "the snapshot group the reason is about"]
    field: D[str, "the field, or empty for the whole group"]
    message: D[str, "one line"]


class Check(TypedDict):
    schema: D[str, "regdiag.check/1"]
    host: D[str, "the host checked"]
    fit: D[bool, "true when nothing makes this host unfit to measure on (exit 0)"]
    reasons: D[list[CheckReason], "what was found, errors first"]


class CheckList(TypedDict):
    schema: D[str, "regdiag.check-list/1"]
    checks: D[list[Check], "one per --host"]


class Difference(TypedDict):
    group: D[str, "the snapshot group: engine, packages, env, gpu, host"]
    field: D[str, "the field that differs"]
    old: D[Any, 'its value in OLD ("<absent>": not there)']
    new: D[Any, 'its value in NEW ("<absent>": not there)']
    change: D[str, "added, removed or changed"]
    rank: D[int, "1 is the likeliest culprit of a slowdown"]
    why: D[str, "why a change there matters, one line"]


class Diff(TypedDict):
    schema: D[str, "regdiag.diff/1"]
    differences: D[list[Difference], "most likely culprits of a slowdown first (empty: none)"]


class _Run(TypedDict, total=False):
    """What every listing and summary of a run says of it."""

    id: D[str, "the run id (what compare, explain and baseline take)"]
    path: D[str, "the record file"]
    created: D[str | None, "when the run started, ISO 8601"]
    probe: D[str | None, "the probe that measured it"]
    config: D[dict[str, Any], "the probe's options"]
    status: D[str | None, "complete, partial, failed, interrupted or running"]
    launches: D[int, "launches in the record"]
    ok_launches: D[int, "launches that count (docs/records.md, usable)"]


class TraceFile(TypedDict):
    path: D[str, "the trace file (<record>.profile-<launch>.json.gz)"]
    bytes: D[int | None, "its size (null: it vanished while listed)"]


class RunEntry(_Run, total=False):
    host: D[str | None, "the host it ran on"]
    problem: D[str, "set instead of the rest when the file cannot be read: why"]
    traces: D[list[TraceFile], "the profile traces beside the record (probe --profile)"]


class RunList(TypedDict):
    schema: D[str, "regdiag.run-list/1"]
    runs: D[list[RunEntry], "the stored runs ($REGDIAG_HOME/runs), newest first"]
    orphan_traces: D[list[TraceFile], "profile traces in $REGDIAG_HOME/runs whose record is gone"]


class BaselineEntry(_Run, total=False):
    name: D[str, "the baseline's name"]
    saved: D[str | None, "when it was saved, ISO 8601"]
    primary: D[str | None, "the primary metric"]
    primary_median: D[float | None, "median of the launch medians of the primary metric"]
    unit: D[str, "the primary metric's unit"]
    problem: D[str, "set instead of the rest when the file cannot be read: why"]


class BaselineList(TypedDict):
    schema: D[str, "regdiag.baseline-list/1"]
    baselines: D[list[BaselineEntry], "by name"]


class HostCheck(TypedDict, total=False):
    name: D[str, "the host as given"]
    address: D[str, "the address connected to"]
    python_version: D[str | None, "the interpreter's version"]
    executable: D[str | None, "the interpreter's path"]
    regdiag: D[str | None, "the bundle's regdiag version"]
    round_trip_s: D[float, "seconds from connecting to the answer"]
    error: D[str, "set instead of the rest when the host failed: why, one line"]


class HostCheckList(TypedDict):
    schema: D[str, "regdiag.host-check-list/1"]
    hosts: D[list[HostCheck], "one per HOST, in the order given"]


class Trust(TypedDict):
    schema: D[str, "regdiag.trust/1"]
    host: D[str, "the host as given"]
    known_hosts_name: D[str, "the name written to known_hosts ([host]:port when the port is not 22)"]
    key_type: D[str, "e.g. ssh-ed25519"]
    fingerprint: D[str, "SHA256:... of the key"]
    status: D[str, "added or already-trusted"]
    file: D[str | None, "the known_hosts file written (null when already trusted)"]


class Cleaned(TypedDict, total=False):
    host: D[str, "local, or the host as given"]
    path: D[str, "the directory removed"]
    existed: D[bool, "whether there was anything to remove"]
    kib: D[int | None, "its size in KiB before (remote hosts)"]
    pruned: D[list[str], "checkouts whose worktrees were pruned"]
    in_use: D[dict[str, str], "environments kept because a running bisect uses them: path -> why"]
    orphan_traces: D[
        list[str], "(local) profile traces removed from $REGDIAG_HOME/runs: their record was gone"
    ]
    traces_kept: D[
        dict[str, Any] | None,
        "(remote hosts) profile traces left on the host, ~/.regdiag/traces: {path, files, kib}; null: none",
    ]
    error: D[str, "set instead of the rest when the host failed: why"]


class Clean(TypedDict):
    schema: D[str, "regdiag.clean/1"]
    hosts: D[list[Cleaned], "one per host"]


# --------------------------------------------------------------------------------------- measuring


class MetricSummary(TypedDict):
    metric: D[str, "the metric: cycle, a phase or a collective's size"]
    unit: D[str, "its unit, e.g. ms"]
    run: D[float | None, "the run's number: geometric mean of the launch medians (compare's old/new)"]
    median: D[float | None, "median over the kept cycles of the launches that count"]
    p25: D[float | None, "25th percentile of the same"]
    p75: D[float | None, "75th percentile of the same"]
    launch_medians: D[list[float | None], "each launch's median: the unit of evidence"]
    n: D[int, "cycles pooled"]


class ProbeSummary(_Run, total=False):
    schema: D[str, "regdiag.probe-summary/1"]
    metrics: D[list[MetricSummary], "primary first, then phases, then the rest"]
    scalars: D[dict[str, float | None], "per-run numbers: tok_s, accept_len_mean, overhead_pct, ..."]
    clocks: D[dict[str, Any] | None, "GPU clocks while cycles were measured (null: no GPU)"]
    accept_len_simulated: D[bool, "true when accept lengths were drawn, not measured"]
    warnings: D[list[str], "one line each"]
    sizes: D[list[Any], "collectives: per message size"]
    comm: D[dict[str, Any], "the communication facts of the run (docs/probes.md)"]
    copy: D[str, "the -o file: a copy of the record, kept as current as the stored one (only with -o)"]
    profile: D[
        dict[str, Any] | None, "--profile: per phase busy, idle, host, syncs, top kernels; cost, traces"
    ]


class ProbeHost(TypedDict, total=False):
    host: D[str, "the --host spec"]
    ok: D[bool, "whether the probe ran there"]
    summary: D[ProbeSummary, "its summary, when ok"]
    error: D[str, "why not, when not ok"]
    exit_code: D[int, "the exit status it would have had alone, when not ok"]


class ProbeHosts(TypedDict):
    schema: D[str, "regdiag.probe-hosts/1"]
    hosts: D[list[ProbeHost], "one per --host, in the order given"]


class ServerSummary(_Run, total=False):
    schema: D[str, "regdiag.server-summary/1"]
    primary: D[str, "the primary metric"]
    itl_ms_median: D[float | None, "median inter-token latency, ms"]
    tok_s_per_request: D[float | None, "tokens per second of one request"]
    ttft_ms_median: D[float | None, "median time to first token, ms"]
    tok_s: D[float | None, "tokens per second of the server"]
    accept_len_mean: D[float | None, "mean accepted tokens per verify step"]


class IngestLaunch(TypedDict, total=False):
    file: D[str, "the log file"]
    status: D[str, "ok or failed"]
    error: D[str | None, "why it failed"]
    scalars: D[dict[str, Any], "what the log gives: itl_ms_median, gen_tok_s_median, accept_len_mean, ..."]
    counts: D[dict[str, Any], "lines read, used, skipped and malformed"]
    engine: D[str | None, "sglang or vllm"]
    formats: D[list[str], "the line formats recognised"]


class Ingest(TypedDict):
    schema: D[str, "regdiag.ingest/1"]
    id: D[str, "the run id"]
    path: D[str, "the run record written"]
    status: D[str, "the run's status"]
    launches: D[list[IngestLaunch], "one per log"]


class EngineSummary(TypedDict, total=False):
    schema: D[str, "regdiag.engine-summary/1"]
    path: D[str, "the run record written"]
    launches: D[int, "launches that count"]
    cycle_ms_median: D[float | None, "median of the launch medians of the cycle, ms"]
    period_ms_median: D[float | None, "the same of the period between cycles, ms"]
    phases_absent: D[list[str], "phases no launch called"]
    graph_share: D[dict[str, float], "per phase: the share of calls replayed from a CUDA graph"]
    accept_len_mean: D[float | None, "mean accepted tokens per verify step"]
    overhead_pct: D[float | None, "the hook's own cost, % of the cycle"]
    phase_sum_gap_pct_median: D[float | None, "the cycle not covered by the phases, %"]
    between_cycles_ms: D[float | None, "time between cycles, ms"]


# ------------------------------------------------------------------------------------- comparing


class Side(TypedDict, total=False):
    label: D[str, "old / new, A / B, or as given"]
    id: D[str, "the run id"]
    created: D[str | None, "when it started"]
    status: D[str | None, "the run's status"]
    probe: D[str | None, "the probe"]
    config: D[dict[str, Any], "the probe's options"]
    host: D[str | None, "the host"]
    launches_total: D[int, "launches in the record"]
    launches_used: D[int, "launches that count"]
    skipped: D[list[Any], "launches left out, with why"]
    clocks: D[dict[str, Any], "GPU clocks while measuring"]


class MetricVerdict(TypedDict, total=False):
    name: D[str, "the metric"]
    role: D[str, "primary, phase or other"]
    unit: D[str, "its unit"]
    higher_is_better: D[bool, "its direction"]
    direction_source: D[str, "where the direction came from"]
    reduce: D[str, "how a launch's cycles become its centre (median)"]
    estimate: D[dict[str, Any], "the change: method, ratio with its confidence interval, p"]
    p_adjusted: D[float | None, "p adjusted for the number of metrics (Holm)"]
    verdict: D[Verdict | None, "REGRESSED, IMPROVED, UNCHANGED or INCONCLUSIVE; null for a setting"]
    more_launches: D[int | None, "launches per side that would likely settle an INCONCLUSIVE"]
    note: D[str, "one line"]
    old_centers: D[list[float], "old side's launch centres"]
    new_centers: D[list[float], "new side's launch centres"]
    noise_old: D[dict[str, Any], "old side's spread between and within launches"]
    noise_new: D[dict[str, Any], "new side's spread"]
    better: D[str, "higher or lower"]
    change: D[float | None, "new / old - 1"]


class _ComparisonExtras(TypedDict, total=False):
    records: D[dict[str, str], "ab: the two records written (A, B)"]
    fleet: D[dict[str, Any], "records of several nodes (ab --slurm): the node-as-block reading"]
    ended: D[str, "ab --slurm: the allocation's end that cut the run short, and at which launch"]


class Comparison(_ComparisonExtras):
    schema: D[str, "regdiag.comparison/1"]
    regdiag_version: D[str, "the regdiag that compared"]
    verdict: D[Verdict, "of the primary metric, of --metric, or the worst size of a sweep"]
    exit_code: D[Literal[0, 1, 3], "1 REGRESSED, 0 UNCHANGED / IMPROVED, 3 INCONCLUSIVE"]
    primary: D[str | None, "the primary metric; null for a suite or sweep of independent metrics"]
    margin: D[float, "smallest change that counts, a fraction"]
    method: D[str, "welch (independent launches) or paired (ab's pairs)"]
    level: D[float, "confidence level of the intervals"]
    old: D[Side, "the old side"]
    new: D[Side, "the new side"]
    metrics: D[list[MetricVerdict], "primary first"]
    context: D[list[Any], "other numbers shown beside, without a verdict"]
    sizes: D[list[Any], "collectives: per message size"]
    attribution: D[dict[str, Any] | None, "which phases the change lives in"]
    throughput: D[dict[str, Any] | None, "tokens per second of each side"]
    phantom: D[list[Any], "changes that are measurement artefacts"]
    warnings: D[list[str], "one line each"]
    notes: D[list[str], "one line each"]
    env_diff: D[list[Any] | None, "differences of the two sides' snapshots; null where a side has none"]
    env_note: D[str | None, "why env_diff is empty, when it is"]
    design: D[dict[str, Any], "how the launches were taken (interleaved pairs, ...)"]
    drift: D[dict[str, Any] | None, "drift within each side"]
    verdict_note: D[str | None, "why the verdict is not the primary metric's own"]
    machine_diff: D[Any, "differences between the machines"]
    sweep: D[str, "a sweep judged per size: the sizes that moved, in one sentence; empty otherwise"]
    judged_by: D[str | None, "the metric --metric named, or null"]
    profile: D[
        dict[str, Any] | None,
        "--profile on both sides: per phase the change as GPU work and GPU idle, the kernels that moved",
    ]


class Explanation(TypedDict, total=False):
    schema: D[str, "regdiag.explanation/1"]
    tok_s: D[float | None, "tokens per second of speculation, the engine's overhead per cycle included"]
    bytes_ratio_verify_decode: D[float | None, "bytes one verify reads over one decode's, this model"]
    throughput: D[dict[str, Any] | None, "the throughput model's reading"]
    phases: D[list[Any], "per phase: time and what it is bound by"]
    bandwidth: D[float | None, "memory bandwidth used, GB/s"]
    bandwidth_source: D[str, "where the bandwidth came from"]
    model: D[dict[str, Any] | None, "the roofline shape"]
    physics: D[str | None, "regression or physics: how much of verify's extra cost the bytes explain"]
    communication: D[list[Any], "collectives' share"]
    notes: D[list[str], "one line each"]


class BisectReport(TypedDict, total=False):
    schema: D[str, "regdiag.bisect-report/1"]
    kind: D[str, "the same id as schema (bisect's first spelling; kept for one release)"]
    verdict: D[str, "CULPRIT, NOT_REPRODUCED, INCONCLUSIVE or PARTIAL"]
    statement: D[str, "the answer in one sentence"]
    metric: D[str, "what was bisected"]
    factors: D[list[dict[str, Any]], "every difference between --good and --bad"]
    notes: D[list[str], "one line each"]
    endpoints: D[dict[str, Any], "the good and bad sides as measured"]
    regression_ms: D[dict[str, float], "bad - good per metric, ms"]
    regression_ms_ci: D[dict[str, Any], "its confidence interval"]
    culprits: D[list[dict[str, Any]], "each named change: factors, ms per metric, share"]
    unexplained_ms: D[dict[str, float], "the regression no culprit accounts for"]
    unexplained_share: D[float | None, "the same, as a share"]
    skipped: D[list[Any], "points that could not be built or run"]
    cleared: D[list[Any], "package factors no measured process loads, cleared without a launch"]
    busy: D[str | None, "what other work took of the CPUs during the launches, when enough to matter"]
    unresolved: D[list[Any], "factors left undecided"]
    cost: D[dict[str, Any], "environments built, launches run and reused, seconds"]
    lanes: D[
        dict[str, Any] | None,
        "where launches ran at once (count, names, parallel), each lane's level, the slow lane, the faults "
        "(launches lost to a lane and run again on another) and the lanes dropped; null with one lane",
    ]
    resumed: D[bool, "whether a journal was continued"]
    replay_mismatches: D[list[str], "journalled decisions that came out otherwise on resume"]
    fixed_env: D[dict[str, Any], "variables held at one value on both sides"]
    journal: D[str, "the journal file"]


class Demo(TypedDict):
    schema: D[str, "regdiag.demo/1"]
    workdir: D[str, "where the runs and the journal are kept"]
    runs: D[dict[str, str], "the good and bad run records"]
    compare: D[Comparison, "compare good bad"]
    bisect: D[BisectReport, "the bisect of the differences"]
    explain: D[Explanation, "explain bad"]
    seconds: D[float, "wall time"]
    commands: D[Any, "the commands that redo each step"]


# schema kind -> its type; what `python -m regdiag.schemas` writes, one file each.
class Error(TypedDict):
    """What a command run with --json (or --format json) prints on stdout when it fails, beside its one
    line on stderr: a script reading stdout gets an object, never nothing."""

    schema: D[str, "regdiag.error/1"]
    error: D[str, "the one line that stderr also shows"]
    exit_code: D[int, "the exit status (docs/cli.md)"]


OUTPUTS: dict[str, Any] = {
    "snapshot": Snapshot,
    "run": Run,
    "snapshot-list": SnapshotList,
    "check": Check,
    "check-list": CheckList,
    "diff": Diff,
    "run-list": RunList,
    "baseline-list": BaselineList,
    "host-check-list": HostCheckList,
    "trust": Trust,
    "clean": Clean,
    "probe-summary": ProbeSummary,
    "probe-hosts": ProbeHosts,
    "server-summary": ServerSummary,
    "ingest": Ingest,
    "engine-summary": EngineSummary,
    "comparison": Comparison,
    "explanation": Explanation,
    "bisect-report": BisectReport,
    "demo": Demo,
    "error": Error,
}
