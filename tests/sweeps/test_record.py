"""The trial record (``sweeps.record``): its fields are documented and typed, it refuses a value of
the wrong type when written, and it reads any stored attributes back without losing one."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import optuna
import pytest

from sweeps import record as rc
from sweeps.record import TrialRecord
from sweeps.spec import objective_names
from sweeps.spec.values import same


def test_every_field_has_a_type_and_a_one_line_comment() -> None:
    source = Path(rc.__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrialRecord")
    fields = [n for n in cls.body if isinstance(n, ast.AnnAssign)]
    assert {f.target.id for f in fields} == {*rc.KINDS, "extra"}  # type: ignore[union-attr]
    undocumented = [
        f.target.id  # type: ignore[union-attr]
        for f in fields
        if not lines[f.lineno - 2].strip().startswith("#: ")
    ]
    assert not undocumented
    assert len(rc.KINDS) >= 60


def test_a_record_round_trips_through_json() -> None:
    rec = TrialRecord(
        outcome="complete",
        pid=12,
        wall_s=3,  # an int is a JSON number: a float field takes it
        config={"d_model": 16},
        storage_problems=["a note"],
        environment_failure=True,
        copy_of=2,
    )
    stored = json.loads(json.dumps(rec.to_attrs()))
    assert stored == {
        "outcome": "complete",
        "pid": 12,
        "wall_s": 3,
        "config": {"d_model": 16},
        "storage_problems": ["a note"],
        "environment_failure": True,
        "copy_of": 2,
    }
    assert TrialRecord.from_attrs(stored) == rec


@pytest.mark.parametrize(
    ("field", "value"),
    [("pid", "12"), ("pid", True), ("wall_s", "1.0"), ("storage_problems", [1]), ("config", [])],
)
def test_a_field_of_the_wrong_type_is_refused_when_written(field: str, value: object) -> None:
    rec = TrialRecord().update(**{field: value})
    with pytest.raises(TypeError, match=f"TrialRecord.{field} = "):
        rec.to_attrs()


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field 'outcom'"):
        TrialRecord().update(outcom="complete")
    with pytest.raises(TypeError):
        TrialRecord(outcom="complete")  # type: ignore[call-arg]
    with pytest.raises(AssertionError, match="outcom"):
        rc.names("outcome", "outcom")


def test_stored_attributes_are_read_without_losing_one() -> None:
    """An older version's key, or a value of another type, is kept and written back as it was."""
    stored = {"outcome": "oom", "pid": "not a number", "retired_key": [1, 2], "wall_s": None}
    rec = TrialRecord.from_attrs(stored)
    assert rec.outcome == "oom" and rec.pid is None and rec.wall_s is None
    assert rec.extra == {"pid": "not a number", "retired_key": [1, 2]}
    assert rec.get("pid") == "not a number"  # the analysis wing coerces what it shows
    assert rec.to_attrs() == {"outcome": "oom", "pid": "not a number", "retired_key": [1, 2]}


def test_a_frozen_trial_is_read_through_the_record() -> None:
    t = optuna.trial.create_trial(
        state=optuna.trial.TrialState.COMPLETE,
        value=1.0,
        user_attrs={"outcome": "complete", "rungs": {"2000": [1.5]}, "copy_of": 3},
    )
    rec = TrialRecord.from_trial(t)
    assert (rec.outcome, rec.rungs, rec.copy_of) == ("complete", {"2000": [1.5]}, 3)
    assert rc.outcome_of(t) == "complete"
    assert rc.value_of(t, rc.RUNGS) == {"2000": [1.5]}
    t.user_attrs = {rc.OUTCOME: 7}  # another type: not an outcome
    assert rc.outcome_of(t) is None and TrialRecord.from_trial(t).extra == {"outcome": 7}


def test_merge_without_and_copies() -> None:
    old = TrialRecord(outcome="complete", host="a", val_bpb=1.5, extra={"k": 1})
    copy = old.without(rc.OWN_RUN)
    assert (copy.outcome, copy.host, copy.val_bpb, copy.extra) == (None, None, 1.5, {"k": 1})
    assert old.host == "a" and copy.extra is not old.extra
    mine = TrialRecord(host="b").merge(copy)
    assert (mine.host, mine.val_bpb, mine.extra) == ("b", 1.5, {"k": 1})


def test_the_key_lists_name_fields() -> None:
    for group in (
        rc.FINAL_METRICS,
        rc.RESULT_FIELDS,
        rc.ESSENTIAL,
        rc.OWN_RUN,
        rc.METRIC_COLUMNS,
        rc.NOTE_COLUMNS,
        rc.HISTORY_COLUMNS,
        rc.WHERE_AND_WHEN,
        tuple(rc.UNIGRAM_BASELINE.values()),
    ):
        assert set(group) <= set(rc.KINDS)
    assert set(rc.INT_METRICS) == {k for k in rc.METRIC_COLUMNS if rc.KINDS[k] is int}
    assert {f.name for f in dataclasses.fields(TrialRecord)} == {*rc.KINDS, "extra"}


def test_objective_names_come_from_the_stored_spec() -> None:
    spec = {"study": {"objectives": ["val_bpb", {"metric": "peak_mem", "direction": "minimize"}]}}
    assert objective_names(spec, 2) == ["val_bpb", "peak_mem"]
    assert objective_names(spec, 1) == ["objective 0"]
    assert objective_names(None, 2) == ["objective 0", "objective 1"]


def test_same_keeps_true_apart_from_one_and_rounds_only_when_asked() -> None:
    """One equality for the spec and for a baseline: ``True`` is never ``1`` (TOML booleans are
    not numbers); a baseline's typed 0.3 matches the 0.1 * 3 a stepped distribution computed."""
    for tol in (0.0, 1e-9):
        assert not same(True, 1, rel_tol=tol) and not same(1, True, rel_tol=tol)
        assert not same(False, 0.0, rel_tol=tol)
        assert same(True, True, rel_tol=tol) and same(256, 256.0, rel_tol=tol)
    assert not same(0.1 * 3, 0.3)
    assert same(0.1 * 3, 0.3, rel_tol=1e-9)
    assert not same(0.3, 0.31, rel_tol=1e-9)
