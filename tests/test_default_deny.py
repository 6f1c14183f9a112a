"""Default-deny redaction, both directions, on shapes generated from families (tests/secret_families.py).

Secrets never appear verbatim at any sink function; harmless values stay exact. The sinks here are the
functions each writer calls (the CLI-level sinks are in test_default_deny_cli.py) and the real
LaunchStream that builds a launch record's stderr_tail and stray_stdout.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secret_families import FAMILIES, HARMLESS, HARMLESS_ARGV, HARMLESS_TEXT, Planted, as_text, env_name

from regdiag.errors import error_line
from regdiag.measure.stream import LaunchStream
from regdiag.snapshot import env as env_group
from regdiag.snapshot.redact import (
    is_hidden,
    redact_argv,
    redact_env,
    redact_tree,
    redact_value,
    scrub_lines,
    scrub_text,
)

LABELS = sorted(FAMILIES)


def test_at_least_sixty_families_and_each_draws_fresh_secrets() -> None:
    assert len(FAMILIES) >= 60
    for label, gen in FAMILIES.items():
        a, b = gen(random.Random(1)), gen(random.Random(2))
        assert a.core and a.core in a.value and a.core != b.core, label


def _sinks(p: Planted) -> dict[str, str]:
    """Every sink function's output for one planted secret, as text."""
    text = as_text(p)
    name = env_name(p, 0)
    out = {
        "free text": scrub_text(text),
        "in a sentence": scrub_text(f"worker 3 said: {text} (retrying in 5 s)"),
        "error line": error_line(f"cannot reach the mirror with {text}"),
        "tail lines": "\n".join(
            scrub_lines(f"Traceback (most recent call last):\n{text}\nValueError: bad".split("\n"))
        ),
        "json tree": json.dumps(redact_tree({"info": text, "n": 3, "argv": ["serve", text]})),
        "env": json.dumps(redact_env({name: p.value, "NCCL_PROTO": "LL"})),
        "value": redact_value(name, p.value)[0],
    }
    if p.kind == "argv":
        out["argv"] = " ".join(redact_argv(p.argv()))
    else:
        out["argv"] = " ".join(redact_argv(["tool", f"{name}={p.value}"]))
    if not p.name:  # a secret by shape, whatever the name: also under a performance family, after a flag
        out["env under a perf name"] = json.dumps(redact_env({"NCCL_EXTRA_0": p.value}))
        out["argv after a flag"] = " ".join(redact_argv(["tool", "--extra", p.value]))
    stream = LaunchStream()
    for line in f"rank 0: starting\n{text}\nrank 0: exit".split("\n"):
        stream.stderr_line(line + "\n")
        stream.stdout_line(line)
    launch = stream.to_launch()
    out["launch record"] = json.dumps(
        {"stderr_tail": stream.stderr_tail, "stray": launch.get("stray_stdout")}
    )
    out["launch failure"] = stream.failure(None, None) or ""
    return out


@settings(max_examples=400, deadline=None, derandomize=True)
@given(label=st.sampled_from(LABELS), rng=st.integers(0, 2**32).map(random.Random))
def test_no_generated_secret_reaches_any_sink_verbatim(label: str, rng: random.Random) -> None:
    p = FAMILIES[label](rng)
    leaks = {sink: out for sink, out in _sinks(p).items() if p.core in out}
    assert leaks == {}, (label, p)


@pytest.mark.parametrize("label", LABELS)
def test_each_family_is_hidden_in_every_sink(label: str) -> None:
    for seed in range(3):
        p = FAMILIES[label](random.Random(seed))
        leaks = {sink: out for sink, out in _sinks(p).items() if p.core in out}
        assert leaks == {}, (label, seed, p)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    env_label=st.sampled_from(sorted(HARMLESS)),
    argv_label=st.sampled_from(sorted(HARMLESS_ARGV)),
    text_label=st.sampled_from(sorted(HARMLESS_TEXT)),
    rng=st.integers(0, 2**32).map(random.Random),
)
def test_harmless_values_stay_exact(
    env_label: str, argv_label: str, text_label: str, rng: random.Random
) -> None:
    name, value = HARMLESS[env_label](rng)
    kept, redacted = redact_env({name: value})
    assert kept == {name: value} and redacted == [], (env_label, value)
    assert env_group.collect({name: value})["fields"][name]["value"] == value
    argv = ["python", "-m", "sglang.launch_server", *HARMLESS_ARGV[argv_label](rng)]
    assert redact_argv(argv) == argv
    assert redact_argv([f"{name}={value}", *argv]) == [f"{name}={value}", *argv]
    text = HARMLESS_TEXT[text_label](rng)
    assert scrub_text(text) == text
    assert error_line(text) == f"regdiag: error: {text}\n"
    assert redact_tree({"subject": text, "env": {name: value}}) == {"subject": text, "env": {name: value}}


def test_a_hidden_value_is_a_keyed_hash_with_its_length_and_changes_show() -> None:
    a, _ = redact_value("PGPASSWORD", "correct horse battery staple")
    b, _ = redact_value("PGPASSWORD", "correct horse battery stapler")
    assert a.startswith("hmac-sha256:") and a.endswith(":len=28") and b.endswith(":len=29")
    assert a != b and is_hidden(a)
    assert redact_value("PGPASSWORD", "correct horse battery staple")[0] == a  # same key, same secret
    group = env_group.collect({"PGPASSWORD": "correct horse battery staple", "NCCL_PROTO": "LL"})
    assert "scrubbed" not in group and "correct" not in json.dumps(group)


def test_a_private_key_split_over_stderr_lines_is_cut_out_whole() -> None:
    p = FAMILIES["pgp private key"](random.Random(7))
    stream = LaunchStream()
    for line in p.value.split("\n"):
        stream.stderr_line(line + "\n")
    tail = "\n".join(stream.stderr_tail)
    assert "BEGIN PGP" not in tail and "Version: GnuPG" not in tail and "<redacted len=" in tail
    # A tail whose BEGIN line has scrolled away still loses the rest of the block.
    lines = p.value.split("\n")
    cut = scrub_lines(lines[3:])
    assert not any(line in "\n".join(cut) for line in lines[3:-2] if len(line) > 8)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    secret_labels=st.lists(st.sampled_from(LABELS), min_size=1, max_size=6, unique=True),
    harmless_labels=st.lists(st.sampled_from(sorted(HARMLESS)), min_size=1, max_size=6, unique=True),
    rng=st.integers(0, 2**32).map(random.Random),
)
def test_both_ways_at_once_in_one_environment(
    secret_labels: list[str], harmless_labels: list[str], rng: random.Random
) -> None:
    """One environment mixing drawn secrets and drawn knobs: every secret hidden, every knob exact."""
    plants = [FAMILIES[label](rng) for label in secret_labels]
    knobs = dict(HARMLESS[label](rng) for label in harmless_labels)
    env = {env_name(p, i, "SGLANG_HINT_"): p.value for i, p in enumerate(plants)}
    env.update(knobs)
    kept, redacted = redact_env(env)
    assert {k: kept[k] for k in knobs} == knobs and set(redacted).isdisjoint(knobs)
    text = json.dumps(kept) + json.dumps(env_group.collect(env))
    assert [p.core for p in plants if p.core in text] == []
