"""The live view, ``sweeps report STUDY --serve``, as a user runs it: a real server on 127.0.0.1
in its own process, on a fabricated study, while a trial finishes in the database.

Waiting is by polling with generous deadlines (never an assertion on how long anything took):
the page must change once a trial finished, whenever that is on this machine.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeps import serve
from sweeps import storage as st
from tests.sweeps import fake_study, helpers
from tests.sweeps.browser import DevTools, chromium_path
from tests.sweeps.cli import assert_user_error, sweeps

STUDY = "live"
TRIALS = 6
#: The new trial's val_bpb: lower than every fabricated one, so it is the best trial shown.
BEST_BPB = 0.4321
#: Generous: a report is built in seconds; a busy 2-core machine may take many times that.
DEADLINE_S = 180


def best_row(number: int) -> str:
    """The best-trial table's first row, as ``sweeps.report.summary`` writes it."""
    return f"<tr><th>trial</th><td>{number}</td></tr>"


def snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file of ``directory``: (sha256, mtime in ns)."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
    }


def wait_for(what: str, check: Callable[[], object]) -> object:
    """``check()``'s first truthy value, asked until ``DEADLINE_S`` (``helpers.wait_for``)."""
    return helpers.wait_for(check, DEADLINE_S, what)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        assert response.status == 200
        return response.read().decode("utf-8")


def add_finished_trial(url: str, name: str) -> int:
    """A complete trial with ``BEST_BPB``, told as a worker tells one (Optuna's storage); its
    number."""
    storage = st.open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        number = len(study.trials)
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                values=[BEST_BPB, 1e8],
                params={"attention": "sdpa"},
                distributions={"attention": CategoricalDistribution(["sdpa", "naive"])},
                user_attrs={"outcome": "complete", "val_bpb": BEST_BPB, "peak_mem_bytes": 10**8},
            )
        )
    finally:
        storage.engine.dispose()
    return number


class Server:
    """``sweeps report STUDY --serve --port 0`` in its own process; ``base``: its address."""

    def __init__(self, url: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sweeps",
                "report",
                STUDY,
                "--storage",
                url,
                "--serve",
                "--port",
                "0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.first = self.proc.stdout.readline()  # printed once the page is built and bound
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", self.first)
        assert found, (self.first, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.base = found.group(0).rstrip("/")

    def state(self) -> dict[str, int]:
        return json.loads(get(f"{self.base}/version"))

    def stop(self, signum: int) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) after ``signum``."""
        self.proc.send_signal(signum)
        out, err = self.proc.communicate(timeout=DEADLINE_S)
        return self.proc.returncode, self.first + out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=60)


@pytest.fixture
def study_db(tmp_path: Path) -> tuple[str, Path]:
    """(URL, directory holding nothing but the database) of a fabricated 6-trial study."""
    directory = tmp_path / "db"
    directory.mkdir()
    url = f"sqlite:///{directory / 'study.db'}"
    fake_study.fabricate(url, STUDY, TRIALS, seed=3)
    return url, directory


@pytest.fixture
def server(study_db: tuple[str, Path]) -> Iterator[Server]:
    running = Server(study_db[0])
    try:
        yield running
    finally:
        running.kill()


def test_the_page_is_built_again_only_when_the_counts_move(study_db: tuple[str, Path]) -> None:
    url, directory = study_db
    live = serve.live_report(url, [STUDY])
    assert live.refresh() and live.state() == {
        "version": 1,
        "trials": TRIALS,
        "finished": TRIALS,
        "served": 0,
    }
    assert not live.refresh() and live.current()[0] == 1  # nothing finished: not rebuilt
    number = add_finished_trial(url, STUDY)
    assert live.refresh() and live.current()[0] == 2
    assert best_row(number).encode() in live.current()[1]
    # The database gone mid-serve: the last page is still served, the problem said once.
    (directory / "study.db").rename(directory / "moved.db")
    page = live.current()[1]
    assert not live.refresh() and live.current() == (2, page)
    assert live.problem and "does not exist" in live.problem


def test_the_page_shows_a_trial_that_finished_while_it_was_served(
    study_db: tuple[str, Path], server: Server
) -> None:
    url, _ = study_db
    page = get(f"{server.base}/")
    assert f"{TRIALS:,} trials" in page and "/version" in page  # the self-refreshing script
    first = server.state()
    assert (first["trials"], first["finished"]) == (TRIALS, TRIALS)
    number = add_finished_trial(url, STUDY)
    wait_for("the rebuilt report", lambda: server.state()["version"] > first["version"])
    page = get(f"{server.base}/")
    assert f"{TRIALS + 1:,} trials" in page and best_row(number) in page
    assert f"{BEST_BPB:.4f}" in page
    code, out, err = server.stop(signal.SIGINT)  # Ctrl-C
    assert code == 0, err
    assert "Traceback" not in err and out.rstrip().endswith("stopped")
    assert "report rebuilt: 7 of 7 trials finished" in out


def test_serving_changes_nothing_in_the_database_and_sigterm_stops_it(
    study_db: tuple[str, Path], server: Server
) -> None:
    _, directory = study_db
    before = snapshot(directory)
    for _ in range(3):
        assert "<title>sweeps report: live</title>" in get(f"{server.base}/")
    polls = server.state()["version"]
    # Let the poller read the database a few times (a sleep, not a measurement).
    time.sleep(3 * serve.POLL_S)
    assert server.state()["version"] == polls  # nothing changed: no rebuild
    code, _, err = server.stop(signal.SIGTERM)
    assert code == 0 and "Traceback" not in err, err
    assert snapshot(directory) == before  # same files (no -wal, -shm, journal), same bytes


def test_other_paths_are_not_found(server: Server) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        get(f"{server.base}/../study.db")
    assert raised.value.code == 404


def test_a_study_that_is_not_there_is_one_line_and_creates_nothing(
    study_db: tuple[str, Path], tmp_path: Path
) -> None:
    url, directory = study_db
    before = snapshot(directory)
    assert_user_error(
        sweeps("report", "nope", "--storage", url, "--serve"), "'nope'", f"studies there: {STUDY}"
    )
    assert snapshot(directory) == before
    missing = tmp_path / "missing.db"
    assert_user_error(
        sweeps("report", STUDY, "--storage", f"sqlite:///{missing}", "--serve"), "does not exist"
    )
    assert not missing.exists()


def test_bad_serve_options_are_one_line(
    study_db: tuple[str, Path], server: Server, tmp_path: Path
) -> None:
    url, _ = study_db
    assert_user_error(
        sweeps("report", STUDY, "--storage", url, "--serve", "--port", "70000"),
        "--port must be 0 to 65535",
    )
    assert_user_error(
        sweeps("report", STUDY, "--storage", url, "--serve", "--out", str(tmp_path / "r.html")),
        "leave out --out",
    )
    taken = server.base.rsplit(":", 1)[1]
    assert_user_error(
        sweeps("report", STUDY, "--storage", url, "--serve", "--port", taken),
        f"cannot serve on 127.0.0.1:{taken}",
        "choose another --port",
    )


@pytest.mark.browser
def test_an_open_page_in_chromium_shows_a_trial_that_finished_after_it_was_opened(
    study_db: tuple[str, Path], server: Server, tmp_path: Path
) -> None:
    url, _ = study_db
    browser = DevTools(chromium_path(), tmp_path / "profile")
    try:
        browser.open(f"{server.base}/")
        html_now = "document.documentElement.outerHTML"
        opened = wait_for(
            "the page to open",
            lambda: browser.evaluate(f"document.readyState === 'complete' && {html_now}"),
        )
        assert f"{TRIALS:,} trials" in opened  # the page as opened: before the new trial
        number = add_finished_trial(url, STUDY)
        # The same open page, never navigated again by the test: its own script reloads it.
        shown = wait_for(
            "the open page to show the new trial",
            lambda: browser.evaluate(
                f"{html_now}.includes({json.dumps(best_row(number))}) && {html_now}"
            ),
        )
        assert f"{TRIALS + 1:,} trials" in shown
        wait_for(
            "the report's scripts on the reloaded page",
            lambda: browser.evaluate(
                "document.getElementById('report-status').dataset.state === 'done'"
            ),
        )
        assert browser.evaluate("document.getElementById('report-status').dataset.errors") == "0"
    finally:
        browser.close()
