"""Out-of-range numbers and deep nesting in a trial child's files (issue 24, item 2): a
``metrics.jsonl`` line ``{"step": 99999999999999999999}`` crashed the orchestrator on both
backends (SQLite's OverflowError, PostgreSQL's "bigint out of range"), and 200,000 nested ``[``
in ``metrics.jsonl`` or ``result.json`` a RecursionError. Now each is a noted problem: the
value (or the line) is dropped, the trial is judged on what was valid, the worker goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from lm.run_files import check_metrics_row, check_result, loads_child
from sweeps import records
from sweeps import storage as st
from sweeps.launchers import PopenChild
from sweeps.runner import RunnerContext, run_trial
from sweeps.spec import read_spec
from sweeps.workers import create_or_resume, load_for_workers
from tests.shared import shared_corpus
from tests.sweeps.helpers import CPU, spec_dict

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")

DEEP = "[" * 200_000
GOOD = {"step": 10, "tokens": 2000, "val_bpb": 3.5, "val_loss": 2.5}
RESULT = {
    "outcome": "complete",
    "reason": "trained",
    "exit_code": 0,
    "tokens_seen": 2000,
    "final_metrics": GOOD,
}


class RawLauncher:
    """Children that write the given text as ``metrics.jsonl`` and ``result.json``, exit 0."""

    kind = "subprocess"

    def __init__(self, metrics: str, result: str) -> None:
        self.metrics, self.result = metrics, result

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict | None = None,
        cpus: list[int] | None = None,
    ) -> PopenChild:
        code = (
            "import json, sys, pathlib; d = pathlib.Path(sys.argv[1])\n"
            "metrics, result = json.loads(sys.stdin.read())\n"
            "(d / 'metrics.jsonl').write_text(metrics)\n"
            "(d / 'result.json').write_text(result)\n"
        )
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", code, str(run_dir)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps([self.metrics, self.result]).encode())
        proc.stdin.close()
        return PopenChild(proc)

    def close(self) -> None:
        pass


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
        return
    from tests.sweeps.pg import fresh_database

    with fresh_database("sweeps_child_values") as pg:
        yield pg.render_as_string(hide_password=False)


CASES = {
    "huge step": (
        json.dumps(GOOD) + "\n" + '{"step": 99999999999999999999, "tokens": 4000, '
        '"val_bpb": 3.4}\n',
        json.dumps(RESULT),
    ),
    "huge everywhere": (
        '{"step": -99999999999999999999, "tokens": 1e400, "val_bpb": '
        '99999999999999999999999, "extra": 99999999999999999999}\n' + json.dumps(GOOD) + "\n",
        json.dumps(
            {
                **RESULT,
                "tokens_seen": 10**30,
                "steps": -(10**30),
                "peak_mem_bytes": 10**25,
                "wall_s": 10**400,
            }
        ),
    ),
    "deep metrics": (json.dumps(GOOD) + "\n" + DEEP + "\n", json.dumps(RESULT)),
    "deep result": (json.dumps(GOOD) + "\n", DEEP),
    "a 5000-digit number": (
        json.dumps(GOOD) + "\n" + '{"step": ' + "9" * 5000 + "}\n",
        json.dumps(RESULT),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_childs_out_of_range_or_deep_values_never_stop_the_orchestrator(
    case: str, url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = shared_corpus(tmp_path_factory)
    spec = read_spec(spec_dict("values", corpus), source=tmp_path / "spec.toml")
    storage = st.open_storage(url, heartbeat_interval=1, grace_period=5, max_retries=0)
    create_or_resume(spec, storage)
    study = load_for_workers(spec, storage)
    metrics, result = CASES[case]
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp_path / "runs",
        launcher=RawLauncher(metrics, result),
        budget_bytes=4 * 2**30,
        poll_s=0.05,
        term_grace_s=5.0,
    )
    for _ in range(2):  # the worker goes on: a second trial runs as well
        report = run_trial(ctx, CPU, study.ask())
        trial = next(t for t in study.get_trials() if t.number == report.number)
        assert trial.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
        assert report.outcome in ("complete", "crashed"), report.reason
        assert trial.user_attrs.get("child_file_problems"), trial.user_attrs
        if case != "deep result":  # a result.json that cannot be read: judged by exit code
            assert report.outcome == "complete" and trial.value == 3.5, report.reason
    assert len(records.read_evals(storage, "values")) >= 2


# --- Hypothesis: any number and any nesting in a child's line -------------------------------

_NUMBERS = hs.one_of(
    hs.integers(min_value=-(10**40), max_value=10**40),
    hs.floats(allow_nan=True, allow_infinity=True),
    hs.integers().map(lambda e: f"1e{e}"),
)


def _numbers_text(n: Any) -> str:
    return n if isinstance(n, str) else json.dumps(n)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    key=hs.sampled_from(["step", "tokens", "val_bpb", "val_loss", "lr", "other"]),
    number=_NUMBERS,
    depth=hs.integers(min_value=0, max_value=300_000),
)
def test_any_number_or_nesting_in_a_child_line_is_kept_in_range_or_dropped(
    key: str, number: Any, depth: int
) -> None:
    line = "{" + json.dumps(key) + ": " + "[" * depth + _numbers_text(number) + "]" * depth + "}"
    try:
        value = loads_child(line)
    except ValueError:
        return  # noted and skipped by the reader
    row, _ = check_metrics_row(value)
    assert row is not None
    json.dumps(row)  # storable as the evals' JSON
    for k, v in row.items():
        if isinstance(v, int) and not isinstance(v, bool) and k != "other":
            assert -(2**63) <= v < 2**63  # fits a BIGINT column on both backends
    result, _ = check_result({"outcome": "complete", key: value[key]})
    assert result is not None
    json.dumps(result)
