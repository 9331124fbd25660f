"""Property-based tests (Hypothesis) of what users and children hand the orchestrator: any byte
string or any mutation of a valid study spec is a ``StudySpec`` or a one-line ``SweepsError``,
never another exception."""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lm.errors import SweepsError
from lm.run_files import METRIC_KEYS, METRIC_TYPES
from sweeps.spec import StudySpec, load_spec, read_spec
from tests.sweeps.helpers import toml_text

#: A loaded machine must not fail a property test on time.
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASE: dict[str, Any] = {
    "study": {"name": "prop", "sampler": "random", "seed": 0, "pruner": "none", "n_trials": 4},
    "corpus": {"dir": "corpus"},
    "fixed": {
        "device": "cpu",
        "tokenizer": "word",
        "d_model": 16,
        "n_layers": 1,
        "n_heads": 2,
        "seq_len": 16,
        "batch_size": 8,
        "max_tokens": 4000,
    },
    "space": {"vocab_size": [300, 600], "lr": {"low": 1e-3, "high": 1e-1, "log": True}},
    "limits": {"memory_budget": "1GiB", "max_wall_s": 60},
}
SECTIONS = ("study", "corpus", "fixed", "space", "limits")
KEYS = (
    "name",
    "sampler",
    "seed",
    "pruner",
    "n_trials",
    "objectives",
    "timeout",
    "storage",
    "dir",
    "source",
    "format",
    "synthetic",
    "val_fraction",
    "out",
    "device",
    "tokenizer",
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "d_ff",
    "seq_len",
    "batch_size",
    "grad_accum",
    "lr",
    "max_tokens",
    "precision",
    "attention",
    "dropout",
    "low",
    "high",
    "log",
    "step",
    "choices",
    "when",
    "memory_budget",
    "max_wall_s",
    "oom_policy",
    "collapse",
    "divergence",
    "max_retries",
    "min_unigram_gap",
    "patience",
    "enabled",
)

scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=40),
    st.sampled_from(
        [
            "auto",
            "cuda:7",
            "1GiB",
            "-1",
            "inf",
            "nan",
            "seq_len > 'abc'",
            "not " * 50 + "true",
            "x" * 300,
            "\x1b]0;T\x07",
            "../../etc",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=10,
)


def assert_one_line(exc: SweepsError) -> None:
    text = str(exc)
    assert text and "\n" not in text, repr(text)


@SETTINGS
@given(st.binary(max_size=400))
def test_any_bytes_as_a_spec_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.toml"
        path.write_bytes(data)
        try:
            spec = load_spec(path, check_paths=False)
        except SweepsError as exc:
            assert_one_line(exc)
            return
        assert isinstance(spec, StudySpec)


@SETTINGS
@given(
    st.lists(
        st.tuples(st.sampled_from(SECTIONS), st.sampled_from(KEYS), values), min_size=1, max_size=4
    )
)
def test_any_mutation_of_a_valid_spec(mutations: list[tuple[str, str, Any]]) -> None:
    data = copy.deepcopy(BASE)
    for section, key, value in mutations:
        data[section][key] = value
    try:
        spec = read_spec(data, source=Path("spec.toml"), check_paths=False)
    except SweepsError as exc:
        assert_one_line(exc)
        return
    assert isinstance(spec, StudySpec)
    first_trial(spec)


def first_trial(spec: StudySpec) -> None:
    """What every worker does with a valid spec, resumed far past its seed: sample a trial and
    build its config. A spec that passed validation must not crash here, except with a
    one-line ``SweepsError`` (an invalid combination is that trial's own problem)."""
    import dataclasses

    import optuna

    from sweeps.space import make_sampler, suggest, trial_config
    from sweeps.workers import offset_seed

    if spec.study.seed is not None:  # a resume adds the trials already run to the seed
        spec = dataclasses.replace(
            spec, study=dataclasses.replace(spec.study, seed=offset_seed(spec.study.seed, 10_000))
        )
    study = optuna.create_study(
        sampler=make_sampler(spec), directions=[o.direction for o in spec.study.objectives]
    )
    trial = study.ask()
    try:
        trial_config(spec, suggest(trial, spec))
    except SweepsError as exc:
        assert_one_line(exc)


@SETTINGS
@given(
    st.lists(
        st.tuples(st.sampled_from(SECTIONS), st.sampled_from(KEYS), values), min_size=1, max_size=3
    )
)
def test_any_mutation_survives_the_toml_round_trip(mutations: list[tuple[str, str, Any]]) -> None:
    """The same, through a TOML file (the values TOML can hold), as ``sweeps run`` reads it."""
    data = copy.deepcopy(BASE)
    for section, key, value in mutations:
        if _toml_safe(value):
            data[section][key] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.toml"
        path.write_text(toml_text(data), encoding="utf-8")
        try:
            load_spec(path, check_paths=False)
        except SweepsError as exc:
            assert_one_line(exc)


def _toml_safe(value: Any) -> bool:
    """TOML integers are 64-bit; its floats keep inf and nan but the writer spells them
    Python's way; nested tables inside arrays are out of the test writer's reach."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x7f" not in value and all(c >= " " or c == "\t" for c in value)
    if isinstance(value, list):
        return all(_toml_safe(v) and not isinstance(v, dict) for v in value)
    if isinstance(value, dict):
        return all(_toml_safe(v) for v in value.values())
    return False


# --- what a child writes -------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*METRIC_KEYS, "x"]), inner, max_size=6)
    ),
    max_leaves=12,
)
lines = st.one_of(
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(METRIC_KEYS), json_values, max_size=8).map(json.dumps),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)


@SETTINGS
@given(st.lists(lines, max_size=6))
def test_any_metrics_lines_give_checked_rows_and_verdicts(texts: list[str]) -> None:
    """Any ``metrics.jsonl`` content: the follower returns objects whose known values have their
    types, and the project's rules judge them without raising."""
    from sweeps import verdicts
    from sweeps.monitor import MetricsFollower
    from sweeps.spec import Limits

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        path.write_text(
            "".join(t.replace("\n", " ") + "\n" for t in texts),
            encoding="utf-8",
            errors="surrogatepass",
        )
        follower = MetricsFollower(path)
        rows = follower.read()
    history: list[dict[str, Any]] = []
    for row in rows:
        assert isinstance(row, dict)
        for key, kind in METRIC_TYPES.items():
            value = row.get(key)
            if value is not None and kind is float:
                assert isinstance(value, (int, float)) and not isinstance(value, bool)
                assert math.isfinite(value)
            elif value is not None:
                assert isinstance(value, kind) and not isinstance(value, bool)
        history.append(row)
        verdicts.project_rules(history, Limits())
