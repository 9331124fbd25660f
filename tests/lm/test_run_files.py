"""The run directory's contract (lm/run_files.py): its files are named in one place only, and its
readers and writers agree with each other."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from lm import run_files
from lm.errors import SweepsError
from lm.run_files import (
    METRIC_KEYS,
    RunResult,
    append_metrics,
    jsonable,
    read_result,
    read_result_dict,
    write_result,
)

REPO = Path(__file__).resolve().parents[2]
FILE_NAMES = {
    run_files.CONFIG_FILE,
    run_files.TOKENIZER_FILE,
    run_files.METRICS_FILE,
    run_files.RESULT_FILE,
    run_files.CHECKPOINT_FILE,
    run_files.LOG_FILE,
}
#: The token cache's own tokenizer file (lm/tokens.py ``FILES``): another directory's contract
#: that happens to use the same name; it is defined once there.
OTHER_CONTRACTS = {("lm/tokens.py", "tokenizer.json")}


def _string_literals(path: Path) -> set[str]:
    """Every string constant in the module that is exactly a whole string (docstrings and
    f-string text included, so a name spelled inside a sentence does not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_the_run_file_names_are_defined_only_in_run_files() -> None:
    assert len(FILE_NAMES) == 6
    found = []
    for package in ("lm", "sweeps"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "lm/run_files.py":
                continue
            for name in sorted(_string_literals(path) & FILE_NAMES):
                if (rel, name) not in OTHER_CONTRACTS:
                    found.append(f"{rel}: {name!r}")
    assert not found, f"import the name from lm.run_files instead of spelling it: {found}"


def test_the_literal_scan_sees_a_redefinition(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Writes result.json."""\nRESULT = "result.json"\nx = f"a {1} result.json"\n'
    )
    assert _string_literals(module) & FILE_NAMES == {"result.json"}


def test_jsonable_nulls_non_finite_floats_at_any_depth() -> None:
    value = {"a": math.nan, "b": [1.5, math.inf, (-math.inf, 2)], 3: {"c": "x", "d": None}}
    assert jsonable(value) == {"a": None, "b": [1.5, None, [None, 2]], "3": {"c": "x", "d": None}}
    json.dumps(jsonable(value), allow_nan=False)  # strict JSON


def test_append_metrics_writes_one_strict_line_per_row(tmp_path: Path) -> None:
    first = append_metrics(tmp_path, {"step": 1, "val_loss": math.nan})
    append_metrics(tmp_path, {"step": 2, "val_loss": 1.25})
    lines = (tmp_path / run_files.METRICS_FILE).read_text(encoding="utf-8").splitlines()
    assert first == {"step": 1, "val_loss": None}
    assert [json.loads(line) for line in lines] == [first, {"step": 2, "val_loss": 1.25}]


def test_a_written_result_reads_back_strictly_and_leniently(tmp_path: Path) -> None:
    result = RunResult("complete", "done", 0, best_val_bpb=math.nan, params={"total": 7})
    write_result(tmp_path, result)
    assert read_result(tmp_path) == RunResult("complete", "done", 0, params={"total": 7})
    assert read_result_dict(tmp_path) == (result.to_dict(), [])
    assert [p.name for p in tmp_path.iterdir()] == [run_files.RESULT_FILE]  # no temp file left


@pytest.mark.parametrize("text", [None, "", "{half", "[1, 2]", '{"reason": "no outcome"}'])
def test_the_lenient_reader_returns_none_for_a_missing_or_partial_result(
    tmp_path: Path, text: str | None
) -> None:
    if text is not None:
        (tmp_path / run_files.RESULT_FILE).write_text(text, encoding="utf-8")
    assert read_result_dict(tmp_path)[0] is None


@pytest.mark.parametrize("value", [[1, 2, 3], "text", 7, None, True])
def test_a_metrics_line_that_is_not_an_object_is_skipped_and_noted(value: object) -> None:
    row, problems = run_files.check_metrics_row(value)
    assert row is None and len(problems) == 1 and "not an object" in problems[0]


def test_a_metrics_value_of_the_wrong_type_is_dropped_and_named() -> None:
    row, problems = run_files.check_metrics_row(
        {
            "step": 3,
            "tokens": "many",
            "val_bpb": "1.2",
            "val_loss": True,
            "lr": None,
            "samples": [{"prompt": "<Q>", "text": "ok"}, [1], {"prompt": 5, "text": "x"}],
            "top_tokens": "x",
            "extra": [1],
        }
    )
    assert row == {
        "step": 3,
        "lr": None,
        "samples": [{"prompt": "<Q>", "text": "ok"}],
        "extra": [1],
    }
    assert [p.split("=")[0] for p in problems] == ["tokens", "val_bpb", "val_loss", "top_tokens"]


def test_a_result_field_of_the_wrong_type_is_dropped_and_named() -> None:
    result, problems = run_files.check_result(
        {
            "outcome": "complete",
            "reason": "done",
            "exit_code": 0,
            "peak_mem_bytes": "big",
            "params": [1],
            "final_metrics": {"val_bpb": "low", "tokens": 10},
            "wall_s": 1.5,
        }
    )
    assert result == {
        "outcome": "complete",
        "reason": "done",
        "exit_code": 0,
        "final_metrics": {"tokens": 10},
        "wall_s": 1.5,
    }
    assert [p.split("=")[0] for p in problems] == [
        "peak_mem_bytes",
        "params",
        "final_metrics: val_bpb",
    ]
    assert run_files.check_result({"outcome": 3})[0] is None


def test_the_strict_reader_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(SweepsError, match="has not finished"):
        read_result(tmp_path)
    (tmp_path / run_files.RESULT_FILE).write_text("{half", encoding="utf-8")
    with pytest.raises(SweepsError, match="not a valid result file"):
        read_result(tmp_path)


def test_metric_keys_are_unique() -> None:
    assert len(set(METRIC_KEYS)) == len(METRIC_KEYS)


def test_progress_file_is_throttled_but_always_written_at_the_end(tmp_path: Path) -> None:
    from lm.run_files import ProgressFile, read_progress_tokens

    assert read_progress_tokens(tmp_path) is None
    progress = ProgressFile(tmp_path, every_s=3600.0)
    progress(10, 100)
    assert read_progress_tokens(tmp_path) == 10  # the first call writes
    progress(20, 100)
    assert read_progress_tokens(tmp_path) == 10  # within every_s: skipped
    progress(100, 100)
    assert read_progress_tokens(tmp_path) == 100  # the end of the budget: always
    (tmp_path / "progress.json").write_text('{"tokens": "many"}')
    assert read_progress_tokens(tmp_path) is None
