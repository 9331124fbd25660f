"""``sweeps copy`` and ``sweeps delete`` are all or nothing: ``kill -9`` of either at 10 %,
40 % and 75 % of its writes (``tests.sweeps.statements``: the process kills itself before its
N-th INSERT/UPDATE/DELETE, so the point is where the work is, not when) leaves the target with
no study or the whole copy, and the source whole or gone, with its curves and samples; a
second run does it all. On SQLite, on PostgreSQL and from SQLite into PostgreSQL.

And what makes them fast, counted rather than timed: a copy's statements do not grow with its
trials (``COPY_BATCH`` rows per statement), and ``status`` reads no trial in full but the best.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from sweeps import lifecycle, records, sql
from sweeps import storage as st
from sweeps import study as service
from tests.sweeps import fake_study
from tests.sweeps.cli import sweeps
from tests.sweeps.pg import fresh_database
from tests.sweeps.statements import Statements, sweeps_killed_at, writes_of

TRIALS = 40
FRACTIONS = (0.10, 0.40, 0.75)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.server),
        pytest.param("sqlite-to-postgresql", marks=pytest.mark.server),
    ]
)
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(source, target) URLs: the source holds ``alpha`` (``TRIALS`` trials, evaluations,
    samples); the target is the same database, or a PostgreSQL one with sweeps' tables."""
    sqlite = f"sqlite:///{tmp_path / 'atomic.db'}"
    if request.param == "sqlite":
        fake_study.fabricate(sqlite, "alpha", TRIALS, seed=5)
        yield sqlite, sqlite
        return
    with fresh_database("sweeps_atomic") as pg:
        url = pg.render_as_string(hide_password=False)
        source = sqlite if request.param == "sqlite-to-postgresql" else url
        fake_study.fabricate(source, "alpha", TRIALS, seed=5)
        st.open_storage(url).engine.dispose()  # the target's tables exist before any count
        yield source, url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.server)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database holding ``alpha``, as ``urls``' source."""
    if request.param == "sqlite":
        found = f"sqlite:///{tmp_path / 'atomic.db'}"
        fake_study.fabricate(found, "alpha", TRIALS, seed=5)
        yield found
        return
    with fresh_database("sweeps_atomic") as pg:
        found = pg.render_as_string(hide_password=False)
        fake_study.fabricate(found, "alpha", TRIALS, seed=5)
        yield found


def whole(url: str, name: str) -> tuple[Any, ...] | None:
    """Everything of study ``name`` that a copy must carry (None: no such study; then no
    ``sweeps_`` rows under its name either): every trial's state, values, parameters,
    intermediate values and attributes, the study's attributes (the spec without its name),
    and every evaluation and sample by trial number."""
    storage = st.open_storage(url)
    try:
        evals = [(r["trial_number"], r["metrics"]) for r in records.read_evals(storage, name)]
        samples = [
            (r["trial_number"], r["prompt"], r["text"]) for r in records.read_samples(storage, name)
        ]
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            assert (evals, samples) == ([], []), f"rows of a study {name!r} that is not there"
            return None
        trials = [
            (
                t.number,
                t.state.name,
                t.values,
                t.params,
                t.intermediate_values,
                t.user_attrs,
                t.system_attrs,
            )
            for t in study.get_trials()
        ]
        attrs = {**study.user_attrs, "spec": lifecycle.renamed_spec(study.user_attrs["spec"], "-")}
        return trials, attrs, [d.name for d in study.directions], evals, samples
    finally:
        storage.engine.dispose()


def kill_points(total: int) -> list[int]:
    return sorted({max(1, round(f * total)) for f in FRACTIONS})


@pytest.mark.slow
def test_a_killed_copy_leaves_nothing_and_a_retry_copies_it_whole(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    source, target = urls
    original = whole(source, "alpha")
    assert original is not None and original[3] and original[4]
    dialect = target.split(":")[0].split("+")[0]
    to = () if source == target else ("--to-storage", target)
    # The same copy under another name, run through once, sizes the kill points.
    total = writes_of(
        sweeps_killed_at(
            dialect, 0, "copy", "alpha", "probe", "--storage", source, *to, cwd=tmp_path
        )
    )
    assert whole(target, "probe") == original
    lifecycle.delete_study(target, "probe")
    assert total >= 10  # enough writes that the points below fall inside the work
    for n in kill_points(total):
        killed = sweeps_killed_at(
            dialect, n, "copy", "alpha", "beta", "--storage", source, *to, cwd=tmp_path
        )
        assert killed.returncode == -9, (n, killed.stderr[-2000:])
        left = whole(target, "beta")
        assert left is None or left == original, f"killed at write {n} of {total}"
        assert whole(source, "alpha") == original
        if left is not None:
            lifecycle.delete_study(target, "beta")
    # The last kill left nothing (or all): a retry of the killed command completes it.
    proc = sweeps("copy", "alpha", "beta", "--storage", source, *to, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert whole(target, "beta") == original


@pytest.mark.slow
def test_a_killed_delete_leaves_the_study_whole_and_a_retry_deletes_it(
    url: str, tmp_path: Path
) -> None:
    original = whole(url, "alpha")
    assert original is not None
    dialect = url.split(":")[0].split("+")[0]
    runs = tmp_path / "runs"
    (runs / "alpha" / "trials" / "0").mkdir(parents=True)
    (runs / "other").mkdir()
    # A copy deleted through once sizes the kill points (the same rows as alpha's).
    lifecycle.copy_study(url, "alpha", "probe")
    total = writes_of(
        sweeps_killed_at(dialect, 0, "delete", "probe", "--yes", "--storage", url, cwd=tmp_path)
    )
    assert whole(url, "probe") is None
    for n in kill_points(total):
        killed = sweeps_killed_at(
            dialect,
            n,
            "delete",
            "alpha",
            "--yes",
            "--storage",
            url,
            "--runs-dir",
            str(runs),
            "--delete-runs",
            cwd=tmp_path,
        )
        assert killed.returncode == -9, (n, killed.stderr[-2000:])
        left = whole(url, "alpha")
        assert left == original, f"killed at write {n} of {total}: not whole"
        # The runs go only after the commit: a study still there keeps its runs.
        assert (runs / "alpha" / "trials" / "0").is_dir()
    proc = sweeps(
        "delete",
        "alpha",
        "--yes",
        "--storage",
        url,
        "--runs-dir",
        str(runs),
        "--delete-runs",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert whole(url, "alpha") is None
    assert not (runs / "alpha").exists() and (runs / "other").is_dir()


# --- counted, not timed --------------------------------------------------------------------------


def test_a_copy_sends_the_same_statements_for_more_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'count.db'}"
    fake_study.fabricate(url, "small", 5, seed=1)
    fake_study.fabricate(url, "large", 30, seed=2)
    monkeypatch.setattr(sql, "COPY_BATCH", 100_000)  # every table in one batch
    counts = []
    for name in ("small", "large"):
        with Statements() as sent:
            lifecycle.copy_study(url, name, f"{name}-copy")
        counts.append(len(sent.seen))
    assert counts[0] == counts[1]  # 6 times the trials, not one statement more
    assert whole(url, "large-copy") == whole(url, "large")

    monkeypatch.setattr(sql, "COPY_BATCH", 50)
    with Statements() as sent:
        lifecycle.copy_study(url, "large", "large-batched")
    inserts = [s for s in sent.touching("trial_user_attributes") if s.write]
    rows = sum(s.rows for s in inserts)
    assert rows == sum(len(t[5]) for t in whole(url, "large")[0])
    assert len(inserts) == math.ceil(rows / 50) and all(s.executemany for s in inserts[:-1])
    assert whole(url, "large-batched") == whole(url, "large")


def one_objective(url: str, n: int) -> None:
    """A one-objective study ``mono`` beside ``alpha``: its best trial is read whole (for its
    unigram baseline), the rest are not."""
    storage = st.open_storage(url)
    study = optuna.create_study(study_name="mono", storage=storage, direction="minimize")
    study.set_user_attr(
        "spec",
        {"study": {"name": "mono", "objectives": [{"metric": "val_bpb", "direction": "minimize"}]}},
    )
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    study.add_trials(
        [
            optuna.trial.create_trial(
                value=2.0 + i / 100,
                params={"x": i / n},
                distributions={"x": dist},
                user_attrs={"outcome": "complete", "unigram_bpb": 3.0},
                intermediate_values={1: 3.0, 2: 2.5},
            )
            for i in range(n)
        ]
    )
    storage.engine.dispose()


def test_status_reads_the_trials_it_counts_not_every_trial_whole(tmp_path: Path) -> None:
    counts, read = [], []
    for n in (5, 30):
        url = f"sqlite:///{tmp_path / f'status-{n}.db'}"
        fake_study.fabricate(url, "alpha", n, seed=4)
        one_objective(url, n)
        storage = st.read_only_storage(url)
        with Statements() as sent:
            rows = service.study_rows(storage)
        storage.engine.dispose()
        assert [sum(r["outcomes"].values()) for r in rows] == [n, n]
        assert rows[0]["best"].endswith("trials on the Pareto front")
        assert rows[1]["best"] == "2.0000 (trial 0; unigram 3.0000)"
        counts.append(len(sent.seen))
        # Parameters and curves belong to whole trials: of those only the best one's are read.
        read.append(
            max(
                s.values
                for table in ("trial_params", "trial_intermediate_values")
                for s in sent.touching(table)
            )
        )
    assert counts[0] == counts[1]
    assert read == [1, 1]
