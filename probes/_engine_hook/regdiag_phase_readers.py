"""What the engine says about each cycle beyond its times, read for regdiag's phase timer
(regdiag_phase_timer.py, which calls these around each call of a target): the accept length, each
phase's CUDA-graph flag, the tokens a phase's forward took. Standard library only; a tensor is read
through its own methods, so torch is never imported here.

The accept length comes from an argument or the return value of a target (`reduce`: a number as is,
`mean` of a tensor or list, `count_ne` per row of a 2-D tensor or list of lists, `len` of each list,
averaged over the rows; `per`: {"arg", "attr"} divides a batch's sum by the len() of that argument's
attribute, SGLang v1's num_accepted_tokens by len(batch.reqs); `plus` adds the bonus token;
`positions` with `count_ne` adds `accept_pos{i}`, the share of rows that accepted at least i drafts);
tensors are copied at the call and read when the cycle is emitted, after its events completed, so
reading it never stalls the engine. A phase's CUDA-graph flag is read from what
the engine says: a context object during the call (`context` + `attr`: an enum whose name is not NONE
is a graph), a graph-replay target called inside the phase (`within`; phase "*": inside whichever phase
is running), an attribute of the phase's return (`ret`), or of another target's return (`target`);
`of` limits a reader to the phase targets it knows (one model runner's replay says nothing of the other).
`tokens` readers ({"phase", "arg", "pos", "attr", "of"}) count the tokens a phase's forward took
(`values.<phase>_tokens`: batch x (draft tokens + 1) for a verify). `only` readers say which calls of a
phase's target are that phase (a worker that serves prefill and decode: the decode steps only).
"""

import inspect
import sys


def _attr(obj, path):
    for part in [p for p in (path or "").split(".") if p]:
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def _keep(v):
    """A value to read later: a tensor is copied now (the engine may reuse its buffer next step)."""
    if hasattr(v, "detach") and hasattr(v, "clone"):
        return v.detach().clone()
    if isinstance(v, (list, tuple)):
        return [list(x) if isinstance(x, (list, tuple)) else x for x in v]
    return v


def _reduce(v, spec):
    """The accept length of one call: the value as is, or averaged over the batch's rows."""
    how = spec.get("reduce")
    if hasattr(v, "tolist"):
        v = v.tolist()
    if how is None:
        return float(v)
    if how == "mean":
        xs = list(v) if isinstance(v, (list, tuple)) else [v]
    elif how == "count_ne":
        xs = [sum(1 for x in row if x != spec.get("value", -1)) for row in v]
    elif how == "len":
        xs = [len(row) for row in v]
    else:
        raise ValueError(f"unknown reduce {how!r}")
    return sum(xs) / len(xs) if xs else None


def _positions(v, spec):
    """Per draft position i, the share of the batch's rows that accepted at least i drafts (a row of
    k + 1 places: accepted drafts, the bonus, then `value` for rejected places): `accept_pos{i}`."""
    try:
        rows = v.tolist() if hasattr(v, "tolist") else v
        k = max(len(row) for row in rows) - 1
        accepted = [sum(1 for x in row if x != spec.get("value", -1)) - 1 for row in rows]
    except Exception:
        return {}
    if k < 1 or not accepted:
        return {}
    return {
        f"accept_pos{i}": round(sum(a >= i for a in accepted) / len(accepted), 5) for i in range(1, k + 1)
    }


def _rows(per, args, kwargs):
    """The batch's sequences, for a `per` reader: len() of an argument's attribute (SGLang v1:
    `batch.reqs` of forward_batch_generation(batch)); None when it cannot be read."""
    if not per:
        return None
    v = kwargs.get(per["arg"])
    if v is None and per.get("pos") is not None and len(args) > per["pos"]:
        v = args[per["pos"]]
    try:
        return len(_attr(v, per.get("attr")))
    except Exception:
        return None


def _graph_of(value):
    """A graph flag from what the engine says: an enum (CUDAGraphMode.NONE is eager), or a truth value."""
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name != "NONE", name
    return bool(value), None


class Readers:
    """The configuration's `accept`, `graph` and `tokens` readers. Each method takes the open cycle
    (`c`, None between cycles where a method may be called then) and writes what it read into it."""

    def __init__(self, cfg):
        acc = cfg.get("accept")
        self.accepts = [acc] if isinstance(acc, dict) else list(acc or [])
        self.graphs = list(cfg.get("graph") or [])
        self.tokens = list(cfg.get("tokens") or [])
        self.only = list(cfg.get("only") or [])

    def roles(self):
        """(target, role) for each reader that needs a target of its own patched."""
        for k, spec in enumerate(self.accepts):
            yield spec["target"], ("accept", k)
        for k, spec in enumerate(self.graphs):
            if spec.get("within") or spec.get("target"):
                yield spec.get("within") or spec["target"], ("graph", k)

    def bind(self, fn, target):
        """Called as `target` is patched with its function `fn`."""
        for acc in self.accepts:
            if acc["target"] != target:
                continue
            for spec in (acc, acc.get("per") or {}):
                if spec.get("arg") and spec.get("pos") is None:
                    try:  # the argument's position, for calls that pass it positionally
                        spec["pos"] = list(inspect.signature(fn).parameters).index(spec["arg"])
                    except (ValueError, TypeError):
                        pass

    def _graph_specs(self, phase, target):
        """The graph readers that speak for this phase's call: its name (or "*"), and its target where
        the reader names the ones it knows ("of": a replay of one model runner says nothing of another's)."""
        for spec in self.graphs:
            if spec["phase"] in (phase, "*") and (not spec.get("of") or target in spec["of"]):
                yield spec

    def graph_before(self, c, phase, target):
        for spec in self._graph_specs(phase, target):
            if not spec.get("context") or phase in c.graph:
                continue
            mod, qual = spec["context"].split(":", 1)
            try:
                flag, mode = _graph_of(_attr(_attr(sys.modules[mod], qual)(), spec.get("attr")))
            except Exception:  # no context set (the engine's own check would fail too): no flag
                continue
            c.graph[phase] = flag
            if mode is not None:
                c.graph_mode[phase] = mode

    def graph_within(self, c, phase, target, roles):
        """A call of `roles`' target inside the running call of `phase`'s `target`."""
        if c is None or phase is None:
            return
        specs = list(self._graph_specs(phase, target))
        for r in roles:
            if r[0] == "graph" and self.graphs[r[1]].get("within") and self.graphs[r[1]] in specs:
                c.graph[phase] = True

    def graph_ret(self, c, roles, result):
        """A flag another target returns for a phase (SGLang's batch result says can_run_cuda_graph)."""
        for r in roles:
            spec = self.graphs[r[1]] if r[0] == "graph" else {}
            if spec.get("target") and c is not None and spec["phase"] not in c.graph:
                try:
                    c.graph[spec["phase"]] = _graph_of(_attr(result, spec["ret"]))[0]
                except Exception:
                    pass

    def admits(self, phase, target, args, kwargs):
        """Whether this call of a phase's target is the phase: `only` readers ({"phase", "pos", "attr",
        "method", "of"}) call a method of an argument's attribute (SGLang's TpModelWorker serves
        prefill and decode alike: `forward_mode.is_decode()` keeps the decode steps). Unreadable: kept."""
        for spec in self.only:
            if spec["phase"] != phase or (spec.get("of") and target not in spec["of"]):
                continue
            v = kwargs.get(spec["arg"]) if spec.get("arg") in kwargs else None
            if v is None and len(args) > spec.get("pos", 1):
                v = args[spec.get("pos", 1)]
            if v is None:
                v = next((kwargs[k] for k in spec.get("kw") or [] if kwargs.get(k) is not None), None)
            try:
                return bool(getattr(_attr(v, spec.get("attr")), spec["method"])())
            except Exception:
                return True
        return True

    def count_tokens(self, c, phase, target, args, kwargs):
        """Tokens in the phase's forward, from an argument: a tensor's first dimension, or a count
        the engine keeps (vLLM V2's scheduler_output.total_num_scheduled_tokens)."""
        for spec in self.tokens:
            if spec["phase"] != phase or (spec.get("of") and target not in spec["of"]):
                continue
            v = kwargs.get(spec["arg"])
            if v is None and spec.get("pos") is not None and len(args) > spec["pos"]:
                v = args[spec["pos"]]
            try:
                v = _attr(v, spec.get("attr"))
                n = int(v) if isinstance(v, int) else int(v.shape[0]) if hasattr(v, "shape") else len(v)
            except Exception:
                continue
            c.tokens[phase] = c.tokens.get(phase, 0) + n
            return

    def graph_after(self, c, phase, target, result, patched):
        """After the call of `phase`'s `target`; `patched`: the targets the timer patched."""
        for spec in self._graph_specs(phase, target):
            if phase in c.graph or spec.get("target"):
                continue
            if spec.get("within") and spec["within"] in patched:
                c.graph[phase] = False  # the replay target exists and was not called: eager
            elif "ret" in spec and spec["phase"] == phase:
                try:
                    c.graph[phase] = _graph_of(_attr(result, spec["ret"]))[0]
                except Exception:
                    pass

    def accept(self, c, roles, args, kwargs, result):
        if c is None:
            return
        for r in roles:
            if r[0] != "accept":
                continue
            spec = self.accepts[r[1]]
            if "ret" in spec:
                try:
                    v = _attr(result, spec["ret"])
                except Exception:
                    continue
            else:
                v = kwargs.get(spec["arg"]) if spec.get("arg") in kwargs else None
                if v is None and spec.get("pos") is not None and len(args) > spec["pos"]:
                    v = args[spec["pos"]]
            if v is not None:
                c.accept.append((spec, _keep(v), _rows(spec.get("per"), args, kwargs)))

    def values(self, c):
        """The cycle's `values`: the accept length (read now: its events completed) and token counts."""
        values = {}
        acc = None
        for spec, v, rows in c.accept:
            try:
                r = _reduce(v, spec)
                if spec.get("per"):  # a batch's sum (SGLang v1's num_accepted_tokens): per sequence
                    r = r / rows if rows else None
            except Exception:  # a value of an unexpected shape: no accept length, not a dead engine
                r = None
            if r is not None:
                acc = (acc or 0.0) + r + float(spec.get("plus", 0))
            if spec.get("positions"):
                values.update(_positions(v, spec))
        if acc is not None:
            values["accept_len"] = round(acc, 5)
        for phase, n in c.tokens.items():
            values[f"{phase}_tokens"] = n
        return values
