"""What a model, a corpus or a child writes is stored on every backend, and recording it never
fails a trial or stops a worker (issue 26: a NUL in a byte-level model's sample stopped every
PostgreSQL worker).

- the one storage rule (``sweeps.text.storable``): NUL and lone surrogates become U+FFFD;
- Hypothesis: any text, every code point, through the samples and the attribute paths of SQLite
  and PostgreSQL reads back as ``storable(text)``;
- a child whose samples and reason hold NUL and a lone surrogate: the trial completes, on both;
- a database that refuses the samples, an evaluation or the notes: one noted line
  (``storage_problems``), the trial judged on its metrics;
- a database error that stops a worker is one line without SQL or parameters, and the CLI's.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from sweeps import optuna_compat, records, runner
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.charts import samples as samples_chart
from sweeps.launchers import PopenChild
from sweeps.record import TrialRecord
from sweeps.runner import RunnerContext, run_trial
from sweeps.spec import StudySpec, read_spec
from sweeps.text import REPLACEMENT, escape_controls, storable
from sweeps.workers import create_or_resume, load_for_workers
from tests.sweeps.helpers import CPU, spec_dict
from tests.sweeps.pg import fresh_database

STORAGE_PROBLEMS = "storage_problems"  # the record's field

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")

#: Every code point, surrogates and NUL included (Hypothesis leaves surrogates out by default).
ANY_TEXT = hs.text(
    hs.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None, exclude_categories=()),
    max_size=60,
)
#: Storage round trips on a loaded machine: no deadline; examples few enough to stay fast.
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# --- the rule ------------------------------------------------------------------------------------


def test_the_rule() -> None:
    assert storable("a\x00b\ud800c\udfffd") == "a\ufffdb\ufffdc\ufffdd"
    kept = "\x01\x1b[2J\t\n\r\x7f\x9b é ✓ \U0001f600 \ufffe \U0010ffff"
    assert storable(kept) == kept  # every other code point is stored as is
    # and shown as the terminal shows it
    assert escape_controls("\x1b]0;T\x07\n", keep_newlines=True) == "\\x1b]0;T\\x07\n"


# --- both backends -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url.render_as_string(hide_password=False)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('text') / 'text.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="module")
def trial_storage(backend: str) -> Iterator[tuple[st.RDBStorage, int]]:
    """A storage on the backend and one RUNNING trial's id to write attributes to."""
    storage = st.open_storage(backend)
    study = optuna.create_study(study_name=f"prop-{uuid_hex()}", storage=storage)
    trial = study.ask()
    yield storage, optuna_compat.trial_id(trial)
    storage.engine.dispose()


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


@SETTINGS
@given(prompt=ANY_TEXT, text=ANY_TEXT)
def test_any_sample_round_trips_to_its_stored_form(
    trial_storage: tuple[st.RDBStorage, int], prompt: str, text: str
) -> None:
    storage, trial_id = trial_storage
    study = f"s-{uuid_hex()}"
    records.record_samples(storage, study, 0, trial_id, [{"prompt": prompt, "text": text}])
    records.record_eval(storage, study, 0, trial_id, {"step": 0, text: prompt})
    [row] = records.read_samples(storage, study)
    assert (row["prompt"], row["text"]) == (storable(prompt), storable(text))
    assert records.read_evals(storage, study)[0]["metrics"][storable(text)] == storable(prompt)


@SETTINGS
@given(key=ANY_TEXT, value=ANY_TEXT)
def test_any_attribute_round_trips_to_its_stored_form(
    trial_storage: tuple[st.RDBStorage, int], key: str, value: str
) -> None:
    storage, trial_id = trial_storage
    runner.write_trial_attrs(
        storage, trial_id, TrialRecord.from_attrs({"reason": value, "k-" + key: [value, {key: 1}]})
    )
    attrs = storage.get_trial(trial_id).user_attrs
    assert attrs["reason"] == storable(value)
    assert attrs["k-" + storable(key)] == [storable(value), {storable(key): 1}]


def test_a_copy_from_an_older_sqlite_database_follows_the_rule(tmp_path: Path, pg_url: str) -> None:
    """SQLite took NUL before the rule: copying such rows into PostgreSQL must not fail."""
    old = st.open_storage(sqlite(tmp_path))
    with old.engine.begin() as conn:  # as the code before the rule wrote it
        conn.execute(
            records.samples_table.insert(),
            [
                {
                    "study_name": "old",
                    "trial_number": 0,
                    "trial_id": 1,
                    "prompt": "<Q>\x00",
                    "text": "a\x00b",
                    "recorded_at": 0.0,
                }
            ],
        )
    target = st.open_storage(pg_url)
    name = f"copied-{uuid_hex()}"
    assert records.copy_study_records(old, "old", target, name, {0: (0, 1)}) == 1
    [row] = records.read_samples(target, name)
    assert (row["prompt"], row["text"]) == ("<Q>\ufffd", "a\ufffdb")
    target.engine.dispose()


# --- a whole trial -------------------------------------------------------------------------------


class WildTextLauncher:
    """A child whose samples and reason hold NUL, a lone surrogate (a JSON ``\\udc80``) and an
    escape sequence, as an untrained byte-level model's can; then it completes."""

    kind = "subprocess"

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
            "s = [{'prompt': '<Q>How\\x00', 'text': 'J\\x001\\udc80\\x1b[2J'}]\n"
            "rows = [{'step': 1, 'tokens': 100, 'val_bpb': 4.0, 'samples': s},\n"
            "        {'step': 2, 'tokens': 200, 'val_bpb': 3.5, 'val_loss': 2.0, 'samples': s}]\n"
            "(d / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\\n' for r in rows))\n"
            "(d / 'result.json').write_text(json.dumps({'outcome': 'complete', 'reason':"
            " 'done\\x00\\udc80', 'exit_code': 0, 'tokens_seen': 200,"
            " 'final_metrics': {'val_bpb': 3.5, 'val_loss': 2.0, 'tokens': 200}}))\n"
        )
        return PopenChild(
            subprocess.Popen([sys.executable, "-c", code, str(run_dir)], start_new_session=True)
        )

    def close(self) -> None:
        pass


def sqlite(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'sweeps.db'}"


def one_trial(
    url: str, tmp: Path, name: str, corpus: Path
) -> tuple[StudySpec, st.RDBStorage, optuna.Study, RunnerContext]:
    spec = read_spec(spec_dict(name, corpus), source=tmp / "spec.toml")
    storage = st.open_storage(url, heartbeat_interval=1, grace_period=5)
    create_or_resume(spec, storage)
    study = load_for_workers(spec, storage)
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp / "runs",
        launcher=WildTextLauncher(),
        budget_bytes=4 * 2**30,
        poll_s=0.05,
        term_grace_s=5.0,
    )
    return spec, storage, study, ctx


def test_a_child_writing_nul_and_surrogates_completes(
    backend: str, tmp_path: Path, corpus: Path
) -> None:
    name = f"wild-{uuid_hex()}"
    _, storage, study, ctx = one_trial(backend, tmp_path, name, corpus)
    report = run_trial(ctx, CPU, study.ask())
    t = study.get_trials()[report.number]
    assert report.outcome == "complete" and t.values == [3.5]
    assert STORAGE_PROBLEMS not in t.user_attrs
    assert t.user_attrs["reason"] == f"done{REPLACEMENT}{REPLACEMENT}"
    texts = {(s["prompt"], s["text"]) for s in records.read_samples(storage, name)}
    assert texts == {("<Q>How\ufffd", "J\ufffd1\ufffd\x1b[2J")}
    # the report shows it as the terminal would: escape sequences as visible text
    html = samples_chart.render(
        samples_chart.data(_frame(records.read_samples(storage, name)), _trials(report.number))
    )
    assert "\\x1b[2J" in html and "\x1b" not in html
    storage.engine.dispose()


def _frame(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame(rows)


def _trials(number: int) -> Any:
    import pandas as pd

    return pd.DataFrame([{"number": number, "outcome": "complete", "val_bpb": 3.5}])


# --- a database that refuses ---------------------------------------------------------------------


class DataError(Exception):
    """Stands for the driver's exception (psycopg.DataError)."""


def refusal(what: str) -> sa.exc.DataError:
    """What SQLAlchemy raises when PostgreSQL refuses a row: SQL and parameters in its text."""
    orig = DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    return sa.exc.DataError(
        f"INSERT INTO {what} (text) VALUES (%(text)s)",
        {"text": "kilobytes of model text " * 100},
        orig,
    )


def test_refused_samples_and_evaluations_are_noted_not_fatal(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, study, ctx = one_trial(sqlite(tmp_path), tmp_path, "refused", corpus)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise refusal("sweeps_samples")

    monkeypatch.setattr(records, "record_samples", refuse)
    monkeypatch.setattr(records, "record_eval", refuse)
    report = run_trial(ctx, CPU, study.ask())
    t = study.get_trials()[report.number]
    assert report.outcome == "complete" and t.values == [3.5]  # judged on its metrics
    notes = t.user_attrs[STORAGE_PROBLEMS]
    assert notes[0] == (
        "the evaluation at step 1 not stored: DataError: PostgreSQL text fields "
        "cannot contain NUL (0x00) bytes"
    )
    assert len(notes) == 4 and all("\n" not in n and "model text" not in n for n in notes)


def test_refused_notes_keep_the_trials_result(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, study, ctx = one_trial(sqlite(tmp_path), tmp_path, "notes", corpus)
    real = optuna_compat.write_user_attrs

    def refuse_notes(rdb: Any, trial_id: int, attrs: dict[str, Any]) -> None:
        if "child_pid" in attrs:  # the whole set; the essential ones alone go through
            raise refusal("trial_user_attributes")
        real(rdb, trial_id, attrs)

    monkeypatch.setattr(optuna_compat, "write_user_attrs", refuse_notes)
    report = run_trial(ctx, CPU, study.ask())
    t = study.get_trials()[report.number]
    assert report.outcome == "complete" and t.values == [3.5]
    assert t.user_attrs["outcome"] == "complete" and "run_dir" in t.user_attrs
    assert t.user_attrs[STORAGE_PROBLEMS] == [
        "the trial's other attributes not stored: DataError: PostgreSQL text fields cannot "
        "contain NUL (0x00) bytes"
    ]


def test_a_database_that_is_gone_is_still_the_workers_error(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only refusals are notes: a lost connection must stop the worker (its trial re-queued)."""
    _, storage, _, _ = one_trial(sqlite(tmp_path), tmp_path, "gone", corpus)

    def gone(*args: Any, **kwargs: Any) -> None:
        raise sa.exc.OperationalError(
            "UPDATE trials", {}, Exception("server closed the connection")
        )

    monkeypatch.setattr(optuna_compat, "write_user_attrs", gone)
    with pytest.raises(sa.exc.OperationalError):
        runner.write_trial_attrs(storage, 1, TrialRecord(outcome="complete"))


# --- what the user sees --------------------------------------------------------------------------


def test_a_worker_stopped_by_the_database_says_one_line(tmp_path: Path, corpus: Path) -> None:
    _, _, study, ctx = one_trial(sqlite(tmp_path), tmp_path, "line", corpus)

    def broken(*args: Any) -> Any:
        raise refusal("sweeps_samples")

    out = wk.WorkerResult()
    with pytest.raises(sa.exc.DataError):
        wk.worker_loop(ctx, CPU, wk.WorkerOptions(n_trials=1), run=broken, out=out)
    assert out.error == (
        "trial 0: DataError: PostgreSQL text fields cannot contain NUL (0x00) bytes"
    )
    assert isinstance(out.exception, sa.exc.DataError)  # kept whole for --debug
    reason = study.get_trials()[0].user_attrs["reason"]
    assert reason.startswith("orchestrator error: DataError:") and "[SQL" not in reason


def test_the_cli_prints_a_database_error_as_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sweeps import cli

    def app() -> None:
        raise refusal("sweeps_samples")

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setitem(cli._state, "debug", False)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.count("\n") == 1
    assert err.startswith("error: database error: DataError: PostgreSQL text fields")
    assert "[SQL" not in err and "model text" not in err and "--debug" in err
    monkeypatch.setitem(cli._state, "debug", True)
    with pytest.raises(sa.exc.DataError):  # --debug: the whole exception, traceback and all
        cli.main()
