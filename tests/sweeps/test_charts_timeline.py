"""The timeline (``sweeps.charts.timeline``): rows per worker, lanes, waits, utilisation, on a
fabricated study whose trials say where and when they ran as the runner records it; and
``sweeps timeline`` printing the same rows."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pandas as pd
import pytest

from sweeps import report, results
from sweeps.charts import timeline
from tests.sweeps import fake_study
from tests.sweeps.cli import assert_user_error, sweeps_here

BASE = datetime.datetime(2026, 1, 1, 12, 0, 0)  # naive local time, as Optuna stores it
T0 = BASE.timestamp()
#: number -> (outcome, where it ran (user attributes), asked, began, ended: seconds after T0).
PLAN = {
    0: ("complete", {"host": "h1", "placed_on": "gpu 0"}, 0, 0, 100),
    1: ("pruned", {"host": "h1", "placed_on": "gpu 0"}, 10, 100, 200),  # waited for gpu 0
    2: ("oom", {"host": "h1", "placed_on": "gpu 1"}, 0, 5, 50),
    3: ("complete", {"host": "h1", "placed_on": "gpu 0"}, 20, 20, 60),  # packed beside 0
    4: ("timeout", {"host": "n2", "placed_on": "cpu", "slurm_job": "77_3"}, 150, 150, 400),
    5: ("complete", {"host": "h1", "placed_on": "gpu 0", "carried_from": "base#3"}, 0, 0, 1),
    6: ("crashed", {"host": "h3", "pid": 99, "placed_on": None}, 30, 30, 130),  # no admission
    7: ("complete", {"host": "h1", "pid": 7, "placed_on": None, "copy_of": 0}, 390, 390, 391),
}
GPU0, GPU1, SLURM, PROCESS = "h1 · gpu 0", "h1 · gpu 1", "n2 · slurm 77_3 · cpu", "h3 · pid 99"


def fabricate(url: str, name: str = "tl") -> None:
    attrs, times = {}, {}
    for number, (_, where, asked, began, ended) in PLAN.items():
        admitted = {} if where.get("placed_on", "") is None else {"admitted_at": T0 + began}
        attrs[number] = {
            "pid": 10,
            "started_at": T0 + asked,
            "admitted_at": None,
            **where,
            **admitted,
        }
        if where.get("placed_on", "") is None:  # its process took it up and ran it
            attrs[number]["started_at"] = T0 + began
        times[number] = (
            BASE + datetime.timedelta(seconds=asked),
            BASE + datetime.timedelta(seconds=ended),
        )
    fake_study.fabricate(
        url,
        name,
        len(PLAN),
        seed=3,
        attrs=attrs,
        times=times,
        outcomes=tuple(p[0] for p in PLAN.values()),
    )


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('timeline') / 'tl.db'}"
    fabricate(url)
    return url


@pytest.fixture(scope="module")
def frame(url: str) -> pd.DataFrame:
    return results.study_frame(url, "tl")


def test_one_row_per_worker_in_the_order_they_began(frame: pd.DataFrame) -> None:
    tl = timeline.data(frame, now=T0 + 10_000)
    assert list(tl.rows["worker"]) == [GPU0, GPU1, PROCESS, SLURM]
    assert (tl.start, tl.end, tl.span_s) == (T0, T0 + 400, 400)
    bars = tl.bars.set_index("number")
    assert 5 not in bars.index  # carried from another study: it did not run here
    assert 7 not in bars.index  # a copy of trial 0's result: it did not train
    assert bars.loc[1, "worker"] == GPU0 and bars.loc[4, "worker"] == SLURM
    assert not bars["running"].any() and tl.queued == 0


def test_waits_run_times_and_lanes(frame: pd.DataFrame) -> None:
    bars = timeline.data(frame).bars.set_index("number")
    assert bars.loc[1, "wait_s"] == pytest.approx(90)  # asked at 10 s, admitted at 100 s
    assert bars.loc[2, "wait_s"] == pytest.approx(5)
    assert bars.loc[1, "run_s"] == pytest.approx(100)
    assert bars.loc[6, "wait_s"] == 0 and bars.loc[6, "run_s"] == pytest.approx(100)
    # trial 3 ran on gpu 0 while trial 0 did: a second lane; trial 1 began when 0 ended
    assert bars.loc[[0, 1, 3], "lane"].tolist() == [0, 0, 1]


def test_utilisation_is_the_busy_share_of_the_span(frame: pd.DataFrame) -> None:
    rows = timeline.data(frame).rows.set_index("worker")
    # gpu 0 ran 0-100 (and 20-60 beside it) and 100-200: 200 s of 400
    assert rows.loc[GPU0, "busy_s"] == pytest.approx(200)
    assert rows.loc[GPU0, "utilisation"] == pytest.approx(0.5)
    assert rows.loc[GPU0, "lanes"] == 2 and rows.loc[GPU0, "trials"] == 3
    assert rows.loc[GPU0, "mean_wait_s"] == pytest.approx(30)
    assert rows.loc[GPU0, "max_wait_s"] == pytest.approx(90)
    assert rows.loc[GPU0, "outcomes"] == {"complete": 2, "pruned": 1}
    assert rows.loc[GPU1, "utilisation"] == pytest.approx(45 / 400)
    assert rows.loc[SLURM, "utilisation"] == pytest.approx(250 / 400)
    assert rows.loc[PROCESS, "utilisation"] == pytest.approx(100 / 400)


def test_a_running_trial_ends_now_and_a_queued_one_has_no_bar(frame: pd.DataFrame) -> None:
    changed = frame.copy()
    changed.loc[changed["number"] == 1, ["outcome", "datetime_complete"]] = ["running", pd.NaT]
    queued = changed["number"] == 0
    changed.loc[queued, "outcome"] = "waiting"
    changed.loc[queued, ["datetime_start", "datetime_complete"]] = pd.NaT
    changed.loc[queued, ["started_at", "admitted_at"]] = math.nan
    tl = timeline.data(changed, now=T0 + 500)
    bars = tl.bars.set_index("number")
    assert 0 not in bars.index and tl.queued == 1
    assert bool(bars.loc[1, "running"]) and bars.loc[1, "ended"] == T0 + 500
    assert tl.end == T0 + 500


def test_clocks_that_disagree_give_no_negative_wait(frame: pd.DataFrame) -> None:
    skewed = frame.copy()
    skewed.loc[skewed["number"] == 2, "admitted_at"] = T0 - 30  # before it was asked
    bars = timeline.data(skewed).bars.set_index("number")
    assert bars.loc[2, "wait_s"] == 0 and bars.loc[2, "began"] == T0 - 30


def test_the_strip_pictures_a_row(frame: pd.DataFrame) -> None:
    tl = timeline.data(frame)
    assert timeline.strip(tl, GPU1, 8) == ["oom", *[None] * 7]  # ran 5-50 s of 0-400 s
    assert timeline.strip(tl, GPU0, 8) == ["complete", "complete", "pruned", "pruned", *[None] * 4]


def test_the_report_draws_a_bar_per_trial_and_each_rows_utilisation(url: str) -> None:
    _, charts, _ = report.build(url, "tl")
    [chart] = [c for c in charts if c.key == "timeline"]
    assert chart.figure is not None and chart.error is None
    drawn = {t.name: len(t.y) for t in chart.figure.data}
    assert drawn == {"waiting": 2, "complete": 2, "pruned": 1, "oom": 1, "timeout": 1, "crashed": 1}
    labels = list(chart.figure.layout.yaxis.ticktext)
    assert f"{GPU0} (50 %)" in labels and f"{SLURM} (62 %)" in labels


def test_sweeps_timeline_prints_rows_and_utilisation(url: str) -> None:
    proc = sweeps_here("timeline", "tl", "--storage", url)
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert "6 trials on 4 worker(s) over 6 min 40 s" in lines[0]
    assert "mean utilisation 37 %" in lines[0]
    [gpu0] = [line for line in lines if line.startswith(GPU0)]
    assert "3 (2 at once)" in gpu0 and "3 min 20 s" in gpu0 and "50 %" in gpu0
    assert "30 s / 1 min 30 s" in gpu0 and "complete 2, pruned 1" in gpu0
    [slurm] = [line for line in lines if line.startswith(SLURM)]
    assert "62 %" in slurm and "timeout 1" in slurm


def test_sweeps_timeline_of_an_unknown_study_is_one_line(url: str, tmp_path: Path) -> None:
    assert_user_error(
        sweeps_here("timeline", "tll", "--storage", url),
        "study 'tll' is not in storage",
        "did you mean 'tl'",
    )
    assert_user_error(
        sweeps_here("timeline", "tl", "--storage", f"sqlite:///{tmp_path / 'missing.db'}"),
        "missing.db",
    )


def test_durations_and_shares_read_as_a_person_reads_them() -> None:
    assert [timeline.duration(s) for s in (0, 4.25, 42, 185, 7620)] == [
        "0 s",
        "4.2 s",
        "42 s",
        "3 min 05 s",
        "2 h 07 min",
    ]
    assert (timeline.share(0.371875), timeline.share(math.nan)) == ("37 %", "-")
