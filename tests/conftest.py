"""The suite's shared fixtures, and the markers that sort tests into tiers.

Fixtures: ``corpus`` (the 300 KB synthetic corpus, built once per run), ``fork_server`` (a fork
server per module), ``pg_url`` (a fresh PostgreSQL database per test), ``big_study`` (the
fabricated 2,000-trial study, built once per run). Everything a test run shares lives in the
run's base temporary directory, and databases get unique names, so the suite runs in parallel
under pytest-xdist (``make test``).

Markers: a test that starts something heavier than a function call is marked by kind, from
the fixtures it uses (below) or by hand (``@pytest.mark.study``) where it starts it itself;
every kind also carries ``integration``. The shared ``corpus`` marks nothing: many tests only
name it in a spec they check. ``make check`` (the inner loop) runs what is neither
``integration`` nor ``slow``.

- ``study``: trains models in child processes (a trial, a study, ``sweeps run``, ``lm.train``);
- ``server``: a PostgreSQL database, a fork server, an HTTP server;
- ``browser``: headless Chromium;
- ``cluster``: a Ray cluster.

Optuna's logging is set here, once, for every test (and every child a test forks): warnings and
errors only, not a line per trial created or finished. A program a test starts afresh (a
subprocess, a spawned pool) logs as Optuna does by default unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tests.shared import run_dir, shared_corpus

optuna.logging.set_verbosity(optuna.logging.WARNING)

KINDS = ("study", "server", "browser", "cluster")

#: The fixtures that start something, and the kind of thing they start.
KIND_OF_FIXTURE = {
    "trained": "study",  # lm/test_train: a model trained once for the module
    "memory_corpus": "study",  # lm/test_memory: peaks measured in training children
    "base_db": "study",  # test_warm_start: a study run once for the module
    "real_study": "study",  # test_report_browser
    "fork_server": "server",
    "pg_url": "server",
    "chromium": "browser",
    "dashboard": "server",
    "server": "server",  # test_serve: `sweeps report --serve` in a process of its own
    "cluster": "cluster",  # test_engines_slurm: a one-node Slurm
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kinds = {
            KIND_OF_FIXTURE[f] for f in getattr(item, "fixturenames", ()) if f in KIND_OF_FIXTURE
        }
        kinds |= {k for k in KINDS if item.get_closest_marker(k)}
        for kind in sorted(kinds):
            item.add_marker(kind)
        if kinds:
            item.add_marker("integration")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 300 KB synthetic corpus (seed 0) the training tests share; copy it to change it."""
    return shared_corpus(tmp_path_factory)


@pytest.fixture(scope="module")
def fork_server() -> Iterator[object]:
    """A fork server for the trials of one module (``--launcher fork``)."""
    from sweeps.forkserver import ForkServer

    with ForkServer() as fork:
        yield fork


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on the test PostgreSQL server (unique name), dropped after the test;
    skipped with the reason where the server is unreachable."""
    from tests.sweeps.pg import fresh_database

    with fresh_database(f"sweeps_{request.module.__name__.rsplit('.', 1)[-1]}") as url:
        yield url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def big_study(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of the fabricated 2,000-trial study ``big`` (SQLite), built once per run."""
    from tests.sweeps import fake_study

    return fake_study.shared_big_study(run_dir(tmp_path_factory))
