"""The report of a conditional search space (``when = "..."``: a parameter set in only some
trials), and of a chart that cannot be drawn: left out with a note, the rest written (issue 34).

The issue's space: ``attention`` in sdpa or naive, ``d_ff`` searched only with sdpa, ``lr`` only
with naive. Every trial lacks one of them, so a chart that needs every parameter in a trial (the
parallel coordinates did, ``dropna``) had no trial left and raised, and ``sweeps report`` exited 1
without a report.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import optuna
import pytest

from sweeps import report, results
from sweeps.charts import parallel, settled
from tests.sweeps import fake_study
from tests.sweeps.cli import sweeps, sweeps_here

ISSUE_SPACE = {"d_ff": "attention == 'sdpa'", "lr": "attention == 'naive'"}
#: The sections of a random-search study's report (no compute budgets: no IsoFLOP fit; not an
#: [ablation]: no effects).
SECTIONS = [
    "pareto",
    "compute",
    "vocab",
    "memory_map",
    "memory_pred",
    "curves",
    "parallel",
    "importance",
    "collapse",
    "samples",
    "timeline",
]


@pytest.fixture(scope="module")
def issue_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('conditional') / 'c.db'}"
    # d_ff comes before attention in fabricate's order: its condition reads attention's draw,
    # as the issue's spec (attention searched first) would
    fake_study.fabricate(url, "cond", 30, seed=3, when=ISSUE_SPACE)
    return url


def _dims(chart_dims: list[dict]) -> dict[str, dict]:
    return {d["label"].removesuffix(" (log)"): d for d in chart_dims}


def test_report_of_a_conditional_space_is_written_with_every_chart(
    issue_url: str, tmp_path: Path
) -> None:
    data = results.load(issue_url, "cond")
    frame = data.trials
    # the space is what the issue says: no trial has both d_ff and lr
    assert not (frame["param_d_ff"].notna() & frame["param_lr"].notna()).any()
    out = tmp_path / "c.html"
    charts, _ = report.write(issue_url, "cond", out)
    assert [c.key for c in charts] == SECTIONS
    assert [c.key for c in charts if c.error is not None] == []
    drawn = [c.key for c in charts if c.figure is not None or c.html]
    assert drawn == SECTIONS
    # parallel coordinates: every trial with a val_bpb is a line (but for the interrupted one),
    # through "(not set)" where its condition was false
    dims, bpb, unset = parallel.data(frame)
    scored = settled(frame)
    scored = scored[scored["val_bpb"].notna()]
    assert len(scored) == frame["val_bpb"].notna().sum() - 1
    assert len(bpb) == len(scored) > 0
    by = _dims(dims)
    for name in ("d_ff", "lr"):
        dim, missing = by[name], scored[f"param_{name}"].isna().to_numpy()
        assert len(dim["values"]) == len(scored) and missing.any() and not missing.all()
        assert dim["ticktext"][0] == parallel.NOT_SET
        at = dim["tickvals"][0]
        assert (np.asarray(dim["values"])[missing] == at).all()
        assert (np.asarray(dim["values"])[~missing] > at).all()
        assert unset[name] == int(missing.sum())
    # d_ff is not set exactly where attention is naive
    assert (scored["param_d_ff"].isna() == (scored["param_attention"] == "naive")).all()
    chart = next(c for c in charts if c.key == "parallel")
    assert "d_ff in" in chart.about and "lr in" in chart.about
    # the importances say which parameters only some trials set
    chart = next(c for c in charts if c.key == "importance")
    assert chart.figure is not None and "Set in only some trials (conditional)" in chart.about
    assert "d_ff (" in chart.about and "lr (" in chart.about
    page = out.read_text()
    assert parallel.NOT_SET in page and "could not be drawn" not in page
    assert page.count('class="chart"') == 10


def test_sweeps_report_of_a_conditional_space_exits_0(issue_url: str, tmp_path: Path) -> None:
    """The issue as the user met it: a process, exit 1 and no report before."""
    out = tmp_path / "cond.html"
    proc = sweeps("report", "cond", "--storage", issue_url, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and "parallel" in proc.stdout and "importance" in proc.stdout
    assert "could not be drawn" not in proc.stdout and "Traceback" not in proc.stderr


# --- random conditional spaces ----------------------------------------------------------------

FIELDS = list(fake_study.DISTRIBUTIONS)  # the order fabricate suggests them in
_CHOICES = {
    name: [c for c in d.choices]
    for name, d in fake_study.DISTRIBUTIONS.items()
    if isinstance(d, optuna.distributions.CategoricalDistribution)
}
_NUMBERS = {"vocab_size": [300, 1000, 4000], "lr": [3e-4, 3e-3, 3e-2]}
_NEVER = "lr > 1000000000.0"  # holds for no trial: the parameter is never set


def _literal(rng: random.Random, field: str) -> str:
    value = rng.choice(_CHOICES.get(field) or _NUMBERS[field])
    return repr(value)


def _comparison(rng: random.Random, field: str) -> str:
    if field in ("tokenizer", "attention"):
        if rng.random() < 0.3:
            picked = rng.sample(_CHOICES[field], rng.randint(1, len(_CHOICES[field]) - 1))
            return f"{field} {rng.choice(['in', 'not in'])} {picked!r}"
        return f"{field} {rng.choice(['==', '!='])} {_literal(rng, field)}"
    return f"{field} {rng.choice(['<', '<=', '>', '>=', '==', '!='])} {_literal(rng, field)}"


def random_space(rng: random.Random) -> dict[str, str]:
    """A ``when`` for some of fabricate's parameters: comparisons of earlier parameters, joined
    by and/or, sometimes negated; sometimes a condition that never holds."""
    when = {}
    for i, name in enumerate(FIELDS):
        roll = rng.random()
        if roll < 0.1:
            when[name] = _NEVER
        elif i and roll < 0.6:
            parts = [_comparison(rng, rng.choice(FIELDS[:i])) for _ in range(rng.randint(1, 2))]
            text = f" {rng.choice(['and', 'or'])} ".join(parts)
            when[name] = f"not ({text})" if rng.random() < 0.2 else text
    return when


def _check_chart(chart: report.Chart, data: results.StudyResults) -> None:
    """One chart of a random conditional space: drawn, or a note saying why not."""
    assert chart.error is None
    assert chart.figure is not None or chart.html or chart.note, chart.key
    frame = data.trials
    if chart.key == "parallel" and chart.figure is not None:
        dims, bpb, unset = parallel.data(frame)
        scored = parallel.lines(frame)
        assert len(bpb) == len(scored)  # no line left out for a parameter it does not set
        for dim in dims[:-1]:
            assert len(dim["values"]) == len(scored)
        names = [c.removeprefix("param_") for c in scored if c.startswith("param_")]
        assert unset == {n: int(k) for n in names if (k := scored[f"param_{n}"].isna().sum())}
        for name in unset:
            dim = _dims(dims)[name]
            assert dim["ticktext"][0] == parallel.NOT_SET
            assert (np.asarray(dim["values"]) == dim["tickvals"][0]).sum() == unset[name]
    if chart.key == "importance" and chart.figure is not None:
        done = frame[(frame["outcome"] == "complete") & frame["val_bpb"].notna()]
        partial = [
            c
            for c in frame
            if c.startswith("param_") and done[c].notna().any() and done[c].isna().any()
        ]
        assert ("Set in only some trials" in chart.about) == bool(partial), chart.about


@pytest.mark.slow
def test_random_conditional_spaces_draw_every_chart_or_say_why(tmp_path: Path) -> None:
    """40 seeded random spaces (random conditions, parameters never set, 0 to 30 trials of
    random outcomes, failed and pruned among them): each chart's data and drawing, then the
    whole report (and two studies' report, whose frames differ in their parameters)."""
    rng = random.Random(34)
    url = f"sqlite:///{tmp_path / 'random.db'}"
    seen_unset = seen_never = 0
    for k in range(40):
        when = random_space(rng)
        n = rng.choice([0, 1, 2, 3, rng.randint(4, 30)])
        first = tuple(rng.choice(fake_study.OUTCOMES) for _ in range(rng.randint(0, n)))
        name = f"space{k}"
        fake_study.fabricate(url, name, n, seed=k, when=when, outcomes=first)
        data = results.load(url, name)
        context = f"{name}: n={n}, outcomes={first}, when={when}"
        # each chart's data() and chart(), in the whole report (report.draw: a chart that
        # raises is a section naming the error, which the assertion shows with the space)
        charts, _ = report.write(url, name, tmp_path / f"{name}.html")
        assert {c.key: c.error for c in charts if c.error} == {}, context
        # the sections that apply, in order (not an [ablation], no compute budgets)
        keys = [c.key for c in charts]
        assert keys == [
            report.CHART_NAMES[make][0] for make in report.CHARTS if report.applies(make, data)
        ], context
        assert not {"effects", "forest", "scaling"} & set(keys), context
        for chart in charts:
            _check_chart(chart, data)
        assert (tmp_path / f"{name}.html").stat().st_size > 0
        params = [c for c in data.trials if c.startswith("param_")]
        seen_unset += any(data.trials[c].isna().any() for c in params)
        seen_never += len(params) < len(FIELDS)
        if k % 8 == 7:  # two studies of different spaces on the same axes
            _, charts, _ = report.build_many(url, [f"space{k - 1}", name])
            assert [c.key for c in charts if c.error] == [], context
    # the property covered what it claims: conditional parameters, and ones never set
    assert seen_unset >= 12 and seen_never >= 10, (seen_unset, seen_never)


# --- a chart that raises ----------------------------------------------------------------------


def test_a_chart_that_raises_is_left_out_with_a_note_and_the_rest_is_written(
    issue_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(trials: object) -> None:
        raise ValueError(
            "zero-size array to reduction operation minimum which has no identity\nsecond line"
        )

    monkeypatch.setattr(parallel, "data", broken)
    out = tmp_path / "broken.html"
    charts, _ = report.write(issue_url, "cond", out)
    assert [c.key for c in charts] == SECTIONS  # every section, the broken one as a note
    failed = {c.key: c for c in charts if c.error is not None}
    assert list(failed) == ["parallel"]
    assert failed["parallel"].error == (
        "ValueError: zero-size array to reduction operation minimum which has no identity"
    )  # one line
    assert failed["parallel"].figure is None
    assert all(c.figure is not None or c.html for c in charts if c.key != "parallel")
    page = out.read_text()
    assert page.count('class="chart"') == 9  # the ten drawn charts but parallel coordinates
    assert (
        "Parallel coordinates: left out, could not be drawn: ValueError: zero-size array "
        "to reduction operation minimum which has no identity</p>"
    ) in page
    assert "second line" not in page
    # the CLI writes the report, exits 0 and says what was left out and why, in one row
    proc = sweeps_here("report", "cond", "--storage", issue_url, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "left out, could not be drawn" in line]
    assert len(rows) == 1 and "parallel: ValueError: zero-size array" in rows[0], proc.stdout
    assert "parallel" not in next(
        line for line in proc.stdout.splitlines() if line.strip().startswith("charts")
    )


def test_a_figure_that_cannot_be_written_is_left_out_with_a_note(
    issue_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chart whose figure plotly cannot write (the failure is in the page, not the data)."""
    to_html = report.pio.to_html

    def failing_for_curves(fig: object, **kwargs: object) -> str:
        if kwargs.get("div_id") == "chart-curves":
            raise TypeError("Object of type Timestamp is not JSON serializable")
        return to_html(fig, **kwargs)

    monkeypatch.setattr(report.pio, "to_html", failing_for_curves)
    _, charts, _ = report.build(issue_url, "cond")
    text = report.render(results.load(issue_url, "cond"), charts)
    curves = next(c for c in charts if c.key == "curves")
    assert curves.error == "TypeError: Object of type Timestamp is not JSON serializable"
    assert curves.figure is None and curves.about == report.LEFT_OUT
    assert [c.key for c in charts if c.error] == ["curves"]
    assert text.count('class="chart"') == 9 and "Learning curves: left out" in text


def test_every_chart_has_a_name_for_its_note(issue_url: str) -> None:
    """``CHART_NAMES`` gives each chart the key it draws under (a failed one keeps its place)."""
    data = results.load(issue_url, "cond")
    for make in report.CHARTS:
        assert report.CHART_NAMES[make][0] == make(data).key
    both = results.combine([data])
    for make in report.compare.CHARTS:
        assert report.CHART_NAMES[make][0] == make(both, ["cond"]).key
