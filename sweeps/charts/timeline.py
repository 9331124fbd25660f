"""When each trial ran, where, and how long it waited: one row per worker, each trial a bar.

A row is where trials run: the host, the Slurm task (``slurm_job``) and the device the trial was
admitted to (``placed_on``: ``gpu 0``, ``node 1a2b3c4d gpu 0`` on Ray, ``cpu``), else the worker
process (``pid``) when it was run without admission. Trials packed onto one device at once
share its row on separate lanes. Per trial, as the runner records it (``runner.run_trial``):

- asked: Optuna's ``datetime_start`` (a worker, or the Ray driver, took the trial up);
- began: ``admitted_at`` (admitted to its device), else ``started_at``, else asked;
- ended: Optuna's ``datetime_complete`` (a running trial: now).

Its wait is asked -> began: for room on a device (the local engine's admission), for Ray to
place its task. A row's utilisation is the share of the study's span (the first asked to the
last ended) during which at least one trial ran on it. Optuna stores its datetimes as the
worker's local time without a zone; they are read as this machine's local time (as Optuna's
own tools do), the recorded Unix times as they are. Trials carried from another study
(``carried_from``) did not run here, a copy of an earlier trial's result (``copy_of``) did not
train, and queued ones have not started: none has a bar.
"""

from __future__ import annotations

import datetime
import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lm import outcomes
from sweeps.charts import Chart, esc, outcome_color, outcome_order, style
from sweeps.results import StudyResults

#: Columns of ``Timeline.bars`` and ``Timeline.rows``.
BAR_COLUMNS = (
    "number",
    "outcome",
    "reason",
    "worker",
    "lane",
    "asked",
    "began",
    "ended",
    "wait_s",
    "run_s",
    "running",
)
ROW_COLUMNS = (
    "worker",
    "trials",
    "lanes",
    "busy_s",
    "utilisation",
    "mean_wait_s",
    "max_wait_s",
    "outcomes",
)
#: The colour of a trial's wait before it began.
WAIT_COLOR = "#bbbbbb"
#: Rows drawn at most (the busiest; the terminal lists every row).
MAX_ROWS = 60


@dataclass
class Timeline:
    """``bars``: one row per trial that started (``BAR_COLUMNS``; times in Unix seconds);
    ``rows``: one per worker, in the order they first began a trial (``ROW_COLUMNS``;
    utilisation a fraction, NaN for a study of no duration); the span (Unix seconds) and the
    trials queued, not started."""

    bars: pd.DataFrame
    rows: pd.DataFrame
    start: float | None
    end: float | None
    queued: int

    @property
    def span_s(self) -> float:
        return 0.0 if self.start is None or self.end is None else self.end - self.start


def worker_of(trial: Mapping[str, Any]) -> str:
    """The row a trial ran on: host, Slurm task, device (or the worker process)."""
    parts = [str(trial["host"])] if _given(trial.get("host")) else []
    if _given(trial.get("slurm_job")):
        parts.append(f"slurm {trial['slurm_job']}")
    if _given(trial.get("placed_on")):
        parts.append(str(trial["placed_on"]))
    elif _given(trial.get("pid")):
        parts.append(f"pid {int(trial['pid'])}")
    return " · ".join(parts) or "unknown worker"


def data(trials: pd.DataFrame, now: float | None = None) -> Timeline:
    """The timeline of ``trials`` (a ``results.study_frame``); ``now`` (default: the clock) ends
    the bars of running trials."""
    now = time.time() if now is None else now
    queued = int((trials["outcome"] == outcomes.WAITING).sum())
    found = []
    for t in trials.to_dict("records"):  # plain dicts: iterrows is ~10x slower
        if _given(t.get("carried_from")) or _given(t.get("copy_of")):
            continue
        asked = _epoch(t.get("datetime_start"))
        began = next(
            (float(v) for v in (t.get("admitted_at"), t.get("started_at")) if _given(v)), asked
        )
        if began is None:  # queued: not started
            continue
        asked = began if asked is None else min(asked, began)  # clocks of two hosts differ
        ended = _epoch(t.get("datetime_complete"))
        running = ended is None
        ended = max(now if ended is None else ended, began)
        found.append(
            {
                "number": int(t["number"]),
                "outcome": t["outcome"],
                "reason": t.get("reason"),
                "worker": worker_of(t),
                "lane": 0,
                "asked": asked,
                "began": began,
                "ended": ended,
                "wait_s": began - asked,
                "run_s": ended - began,
                "running": running,
            }
        )
    if not found:
        return Timeline(
            pd.DataFrame(columns=list(BAR_COLUMNS)),
            pd.DataFrame(columns=list(ROW_COLUMNS)),
            None,
            None,
            queued,
        )
    found.sort(key=lambda b: (b["began"], b["number"]))
    start, end = min(b["asked"] for b in found), max(b["ended"] for b in found)
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for bar in found:
        by_worker.setdefault(bar["worker"], []).append(bar)
    rows = []
    for worker, part in by_worker.items():  # in the order each first began a trial
        for bar, lane in zip(part, _lanes(part), strict=True):
            bar["lane"] = lane
        busy = _union([b["began"] for b in part], [b["ended"] for b in part])
        waits = [b["wait_s"] for b in part]
        counts: dict[str, int] = {}
        for bar in part:
            counts[bar["outcome"]] = counts.get(bar["outcome"], 0) + 1
        rows.append(
            {
                "worker": worker,
                "trials": len(part),
                "lanes": max(b["lane"] for b in part) + 1,
                "busy_s": busy,
                "utilisation": busy / (end - start) if end > start else math.nan,
                "mean_wait_s": sum(waits) / len(waits),
                "max_wait_s": max(waits),
                "outcomes": {o: counts[o] for o in outcome_order(counts)},
            }
        )
    return Timeline(
        pd.DataFrame(found, columns=list(BAR_COLUMNS)),
        pd.DataFrame(rows, columns=list(ROW_COLUMNS)),
        start,
        end,
        queued,
    )


def strip(tl: Timeline, worker: str, width: int) -> list[str | None]:
    """The row ``worker`` in ``width`` cells across the span: each cell the outcome of the trial
    that ran longest in it, None where nothing ran (the terminal's picture of a row)."""
    if tl.start is None or tl.span_s <= 0 or width < 1:
        return [None] * max(width, 0)
    part = tl.bars[tl.bars["worker"] == worker]
    assert tl.end is not None  # set with start
    edges = np.linspace(tl.start, tl.end, width + 1)
    began, ended = part["began"].to_numpy(), part["ended"].to_numpy()
    cells: list[str | None] = []
    for lo, hi in itertools.pairwise(edges):
        overlap = np.minimum(ended, hi) - np.maximum(began, lo)
        best = int(np.argmax(overlap)) if len(overlap) else -1
        cells.append(part["outcome"].iloc[best] if best >= 0 and overlap[best] > 0 else None)
    return cells


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 42 s, 3 min 05 s, 2 h 07 min."""
    if not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s" if 0 < seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def share(fraction: float) -> str:
    """A utilisation as a percentage ("-" for a study of no duration)."""
    return "-" if not math.isfinite(fraction) else f"{100 * fraction:.0f} %"


def chart(results: StudyResults) -> Chart:
    title = "Timeline: when and where each trial ran"
    tl = data(results.trials)
    slurm = "slurm_job" in results.trials and bool(results.trials["slurm_job"].notna().any())
    about = (
        f"One row per worker (its host{', Slurm task' if slurm else ''} and the device a "
        "trial was admitted to, or its process): each trial a bar from when it began to "
        "when it ended, coloured by outcome; the grey line before it is its wait (taken up, "
        "not yet admitted to a device or placed by Ray). Utilisation: the share of the "
        "study's span during which the row ran a trial."
    )
    if tl.bars.empty:
        return Chart("timeline", title, about, note="No trial has started yet.")
    rows = tl.rows
    if len(rows) > MAX_ROWS:
        about += f" The {MAX_ROWS} busiest of {len(rows)} rows are drawn."
        rows = rows.nlargest(MAX_ROWS, "busy_s").sort_index()
    # One y position per (row, lane), the first row on top; a row's label on its first lane.
    positions: dict[tuple[str, int], float] = {}
    ticks, labels, y = [], [], 0.0
    for _, r in rows.iloc[::-1].iterrows():
        for lane in range(int(r["lanes"])):
            positions[(r["worker"], lane)] = y + lane
        ticks.append(y)
        labels.append(f"{esc(r['worker'])} ({share(r['utilisation'])})")
        y += int(r["lanes"]) + 0.5
    bars = tl.bars[tl.bars["worker"].isin(set(rows["worker"]))].copy()
    bars["y"] = [positions[(w, lane)] for w, lane in zip(bars["worker"], bars["lane"], strict=True)]
    fig = go.Figure()
    waits = bars[bars["wait_s"] > 0]
    if len(waits):
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=waits["y"] - 0.43,
                base=_dates(waits["asked"]),
                x=waits["wait_s"] * 1000,
                width=0.1,
                name="waiting",
                marker_color=WAIT_COLOR,
                text=[
                    f"trial {n}: waited {duration(w)}"
                    for n, w in zip(waits["number"], waits["wait_s"], strict=True)
                ],
                textposition="none",
                hovertemplate="%{text}<extra></extra>",
            )
        )
    for outcome in outcome_order(bars["outcome"]):
        part = bars[bars["outcome"] == outcome]
        hover = [
            f"trial {n}: {esc(o)}{' (still running)' if run else ''}<br>{esc(w)}<br>"
            f"ran {duration(r)}, waited {duration(wt)}<br>{esc(reason or '')}"
            for n, o, w, r, wt, reason, run in zip(
                part["number"],
                part["outcome"],
                part["worker"],
                part["run_s"],
                part["wait_s"],
                part["reason"],
                part["running"],
                strict=True,
            )
        ]
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=part["y"],
                base=_dates(part["began"]),
                x=np.maximum(part["run_s"].to_numpy(), 0.0) * 1000,
                width=0.7,
                name=outcome,
                marker={"color": outcome_color(outcome), "line": {"width": 0.5, "color": "#333"}},
                text=hover,
                textposition="none",
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.update_xaxes(type="date", title_text="time (this machine's local time)")
    fig.update_yaxes(
        tickvals=ticks,
        ticktext=labels,
        zeroline=False,
        showgrid=False,
        title_text="worker (utilisation)",
    )
    about += (
        f" Span {duration(tl.span_s)}; trials queued, not started: {tl.queued}."
        if tl.queued
        else f" Span {duration(tl.span_s)}."
    )
    height = min(max(260, 60 + 22 * (y + 1)), 1400)
    return Chart("timeline", title, about, figure=style(fig, height=int(height), barmode="overlay"))


# --- helpers ----------------------------------------------------------------------------------


def _given(value: object) -> bool:
    return (
        value is not None
        and not (isinstance(value, float) and math.isnan(value))
        and value is not pd.NA
        and value is not pd.NaT
    )


def _epoch(value: object) -> float | None:
    """A datetime of Optuna's (naive: local time) or pandas' as Unix seconds."""
    if not _given(value):
        return None
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if not isinstance(value, datetime.datetime):
        return None
    return value.timestamp()


def _dates(seconds: pd.Series) -> list[datetime.datetime]:
    return [datetime.datetime.fromtimestamp(s) for s in seconds]


def _lanes(part: list[dict[str, Any]]) -> list[int]:
    """A lane per bar (``part`` sorted by began): the first lane whose last bar has ended."""
    free: list[float] = []  # each lane's last end
    lanes = []
    for bar in part:
        lane = next((i for i, last in enumerate(free) if last <= bar["began"]), len(free))
        if lane == len(free):
            free.append(bar["ended"])
        else:
            free[lane] = bar["ended"]
        lanes.append(lane)
    return lanes


def _union(began: list[float], ended: list[float]) -> float:
    """Seconds covered by at least one of the intervals."""
    total, reach = 0.0, -math.inf
    for lo, hi in sorted(zip(began, ended, strict=True)):
        if hi <= reach:
            continue
        total += hi - max(lo, reach)
        reach = hi
    return float(total)


def applies(results: StudyResults) -> bool:
    """Some trial ran: it has a bar from when it began to when it ended (a queued study, or one
    whose trials were all carried or copied, has nothing to show)."""
    return not data(results.trials).bars.empty
