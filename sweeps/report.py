"""The trade-off report: every chart of ``sweeps.charts`` in one self-contained HTML file.

plotly.js is inlined once in the head (each chart carries only its data), so the file opens
offline and a 2,000-trial study stays a few MB, most of it plotly.js itself. The header
summarises the study (storage with credentials masked, trials by outcome, the best trial and its
config). Several studies (``build_many``) share one report: a table of the studies, then
``sweeps.charts.compare``'s charts with the study as the colour. A small script records page
errors (``window.onerror``, rejected promises, ``console.error``) and, once the page has
loaded, how many charts rendered, into ``#report-status``: what the browser test reads, and what
a user sees if something broke.

A chart is drawn only where it applies (``APPLIES``: each chart module's ``applies``, from the
study's data: an ``[ablation]`` spec, a varied seq_len or batch, more than one vocabulary, ...);
one that does not is left out, with no section and no link, never an empty placeholder.

Each chart is drawn in isolation (``draw``): one whose data or drawing raises is left out, its
section a note naming the chart and the error in one line, and the rest of the report is written;
``sweeps report`` lists it as left out. The error is named, never swallowed: it is a bug to report.
"""

from __future__ import annotations

import datetime
import html
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio
import plotly.offline

from lm import outcomes
from lm.errors import SweepsError
from lm.files import output_target, write_output
from sweeps import record as rc
from sweeps import results as results_mod
from sweeps.charts import (
    MIB,
    Chart,
    collapse,
    colors,
    compare,
    compute,
    curves,
    effects,
    importance,
    memory_map,
    memory_pred,
    outcome_color,
    outcome_order,
    parallel,
    pareto,
    samples,
    scaling,
    timeline,
    transfer,
    vocab,
)
from sweeps.results import StudyResults
from sweeps.storage import describe_error

#: The report's sections, in order.
CHARTS: tuple[Callable[[StudyResults], Chart], ...] = (
    effects.table_chart,
    effects.forest_chart,  # an [ablation] study's answer first
    pareto.chart,
    compute.chart,
    scaling.chart,
    transfer.chart,
    vocab.chart,
    memory_map.chart,
    memory_pred.chart,
    curves.chart,
    parallel.chart,
    importance.chart,
    collapse.chart,
    samples.chart,
    timeline.chart,
)
#: What a chart is called when it could not be drawn (its section's key, and a name for the note
#: and the heading): every function of ``CHARTS`` and of ``compare.CHARTS``.
CHART_NAMES: dict[Callable[..., Chart], tuple[str, str]] = {
    effects.table_chart: ("effects", "Ablation effects"),
    effects.forest_chart: ("forest", "Ablation effects: forest plot"),
    pareto.chart: ("pareto", "Pareto fronts"),
    compute.chart: ("compute", "Quality against compute"),
    scaling.chart: ("scaling", "Scaling laws"),
    transfer.chart: ("transfer", "Learning-rate transfer"),
    vocab.chart: ("vocab", "Vocabulary"),
    memory_map.chart: ("memory_map", "Where memory runs out"),
    memory_pred.chart: ("memory_pred", "Predicted against measured peak memory"),
    curves.chart: ("curves", "Learning curves"),
    parallel.chart: ("parallel", "Parallel coordinates"),
    importance.chart: ("importance", "Parameter importances"),
    collapse.chart: ("collapse", "Verdicts on predictions"),
    samples.chart: ("samples", "Generated samples"),
    timeline.chart: ("timeline", "Timeline"),
    compare.pareto_chart: ("compare-pareto", "Pareto fronts by study"),
    compare.vocab_chart: ("compare-vocab", "Vocabulary by study"),
    compare.curves_chart: ("compare-curves", "Learning curves by study"),
}
#: Whether a chart has anything to say about a study, from its data (``draw`` asks before drawing;
#: a chart not named here always applies). Compare charts ask of the studies' combined frames.
APPLIES: dict[Callable[..., Chart], Callable[[StudyResults], bool]] = {
    effects.table_chart: effects.applies,
    effects.forest_chart: effects.applies,
    pareto.chart: pareto.applies,
    compute.chart: compute.applies,
    scaling.chart: scaling.applies,
    transfer.chart: transfer.applies,
    vocab.chart: vocab.applies,
    memory_map.chart: memory_map.applies,
    memory_pred.chart: memory_pred.applies,
    curves.chart: curves.applies,
    parallel.chart: parallel.applies,
    importance.chart: importance.applies,
    collapse.chart: collapse.applies,
    samples.chart: samples.applies,
    timeline.chart: timeline.applies,
    compare.pareto_chart: pareto.applies,
    compare.vocab_chart: vocab.applies,
    compare.curves_chart: curves.applies,
}
LEFT_OUT = (
    "This chart could not be drawn, so it is left out (a bug: please report the line "
    "below); the rest of the report is complete."
)
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

# Runs first in <head>: errors of anything after it (plotly.js, the charts) are recorded.
_ERROR_CAPTURE = """<script>
window.__reportErrors = [];
window.addEventListener("error", function (e) {
  window.__reportErrors.push("error: " + (e.message || e.type));
});
window.addEventListener("unhandledrejection", function (e) {
  window.__reportErrors.push("unhandled rejection: " + String(e.reason));
});
(function () {
  var original = console.error;
  console.error = function () {
    window.__reportErrors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
</script>"""

# Runs at the end of <body>: after load (and a moment for plotly's async layout), count charts.
_STATUS = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var charts = document.querySelectorAll(".chart");
    var rendered = 0;
    charts.forEach(function (c) { if (c.querySelector(".main-svg")) { rendered += 1; } });
    var status = document.getElementById("report-status");
    status.setAttribute("data-charts", String(charts.length));
    status.setAttribute("data-rendered", String(rendered));
    status.setAttribute("data-errors", String(window.__reportErrors.length));
    status.setAttribute("data-state", "done");
    document.getElementById("report-errors").textContent = window.__reportErrors.join("\\n");
    if (window.__reportErrors.length || rendered < charts.length) {
      status.textContent = "Some charts failed to render: " + (charts.length - rendered) +
        " of " + charts.length + "; errors: " + window.__reportErrors.length;
      status.className = "broken";
    }
  }, 500);
});
</script>"""

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
       max-width: 1400px; padding: 0 24px 48px; color: #222; }
header { border-bottom: 1px solid #ddd; padding: 16px 0; }
h1 { margin: 0 0 8px; font-size: 24px; } h2 { margin: 32px 0 4px; font-size: 19px; }
.meta { color: #555; font-size: 14px; } .meta code { background: #f4f4f4; padding: 1px 4px; }
.outcomes { margin: 10px 0; } .chip { display: inline-block; color: #fff; border-radius: 10px;
  padding: 1px 9px; margin: 2px 4px 2px 0; font-size: 13px; white-space: nowrap; }
.best { display: flex; gap: 32px; flex-wrap: wrap; font-size: 14px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #e2e2e2; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f6f6; }
table.samples td.text { font-family: ui-monospace, Menlo, Consolas, monospace;
  white-space: pre-wrap; max-width: 520px; }
nav { font-size: 14px; margin-top: 10px; } nav a { margin-right: 12px; }
.about { color: #555; font-size: 14px; margin: 0 0 8px; max-width: 1000px; }
.note { background: #fafafa; border-left: 4px solid #ccc; padding: 10px 14px; color: #444; }
.note.warning { background: #fff8e1; border-left-color: #f0a202; }
#report-status.broken { background: #fde8e8; border: 1px solid #d62728; padding: 8px; }
#report-errors:empty { display: none; }
"""


def build(
    storage: results_mod.StorageLike, study_name: str, *, color_by: str | None = None
) -> tuple[str, list[Chart], StudyResults]:
    """(HTML, charts, data) of a study's report; ``color_by``: the field that colours the
    curves, vocabulary and Pareto points (``sweeps.charts.colors.choose``; default: what
    varied)."""
    data = results_mod.load(storage, study_name)
    data.color_by = colors.choose(data, color_by)
    charts = [c for c in (draw(make, data) for make in CHARTS) if c is not None]
    return render(data, charts), charts, data


def draw(make: Callable[..., Chart], data: StudyResults, *args: object) -> Chart | None:
    """``make(data, *args)`` if it ``applies``, else None; a chart that raises (in its data,
    its drawing, or ``applies``) becomes a section that says so: ``failed``."""
    try:
        return make(data, *args) if applies(make, data) else None
    except Exception as exc:  # any bug of one chart: the others are still drawn
        return failed(make, exc)


def failed(make: Callable[..., Chart], exc: BaseException) -> Chart:
    """The section of a chart that could not be drawn: its name and the error, one line."""
    key, name = CHART_NAMES[make]
    return Chart(key, name, LEFT_OUT, error=describe_error(exc))


def applies(make: Callable[..., Chart], data: StudyResults) -> bool:
    """Whether the chart ``make`` draws has anything to say about ``data`` (``APPLIES``)."""
    test = APPLIES.get(make)
    return True if test is None else bool(test(data))


def write(
    storage: results_mod.StorageLike, study_name: str, out: Path, *, color_by: str | None = None
) -> tuple[list[Chart], StudyResults]:
    """Write the report to ``out`` by ``lm.files.write_output``'s rules (atomic; a symlink
    written through; a directory, FIFO or device refused; a failed write one line)."""
    output_target(out)  # refuse a bad --out before the work of building the report
    text, charts, data = build(storage, study_name, color_by=color_by)
    write_output(out, lambda f: f.write(text.encode("utf-8")))
    return charts, data


def build_many(
    storage: results_mod.StorageLike, names: list[str]
) -> tuple[str, list[Chart], StudyResults]:
    """(HTML, charts, combined data) of a report of several studies on the same axes."""
    studies = results_mod.load_many(storage, names)
    data = results_mod.combine(studies)
    charts = [c for c in (draw(make, data, names) for make in compare.CHARTS) if c is not None]
    return render(data, charts, header=summary_many(studies)), charts, data


def write_many(
    storage: results_mod.StorageLike, names: list[str], out: Path
) -> tuple[list[Chart], StudyResults]:
    """``write`` for several studies (``build_many``)."""
    output_target(out)
    text, charts, data = build_many(storage, names)
    write_output(out, lambda f: f.write(text.encode("utf-8")))
    return charts, data


def write_pngs(charts: list[Chart], directory: Path) -> list[Path]:
    """Each chart's figure as ``<key>.png`` (needs the optional ``kaleido`` package)."""
    if importlib.util.find_spec("kaleido") is None:
        raise SweepsError(
            "--png needs the kaleido package, which is not installed; "
            "run `pip install kaleido` or leave out --png"
        )
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for chart in charts:
        if chart.figure is None:
            continue
        path = directory / f"{chart.key}.png"
        try:
            chart.figure.write_image(path, format="png", width=1200)
        except Exception as exc:  # kaleido's failures (no Chrome, ...) vary by version
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SweepsError(f"--png: kaleido could not draw {chart.key}: {first}") from None
        written.append(path)
    return written


# --- HTML -------------------------------------------------------------------------------------


def render(data: StudyResults, charts: list[Chart], header: str | None = None) -> str:
    """The page: ``header`` (default: the one study's ``summary``), the charts, the scripts."""
    e = html.escape
    nav = " ".join(f'<a href="#{c.key}">{e(nav_label(c))}</a>' for c in charts)
    sections = "\n".join(_section(c) for c in charts) or (
        '<p class="note">No chart applies to this study yet: none has a result to draw.</p>'
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sweeps report: {e(data.name)}</title>
{_ERROR_CAPTURE}
<style>{_CSS}</style>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>
</head><body>
{summary(data) if header is None else header}
<nav>{nav}</nav>
<div id="report-status" data-state="loading"></div><pre id="report-errors"></pre>
{sections}
{_STATUS}
</body></html>
"""


def nav_label(chart: Chart) -> str:
    """A section's link: its name in ``CHART_NAMES`` (one per key, so no two links read the
    same), else its title up to the colon."""
    names = {key: name for key, name in CHART_NAMES.values()}
    return names.get(chart.key, chart.title.split(":")[0])


def _section(chart: Chart) -> str:
    """A chart's section. A figure that plotly cannot write makes ``chart`` a failed one (its
    ``error`` set, the figure dropped), so the charts ``build`` returns say so too."""
    e = html.escape
    body = None
    if chart.figure is not None and chart.error is None:
        try:
            body = (
                '<div class="chart" data-chart="'
                + chart.key
                + '">'
                + pio.to_html(
                    chart.figure,
                    include_plotlyjs=False,
                    full_html=False,
                    div_id=f"chart-{chart.key}",
                    config=PLOTLY_CONFIG,
                )
                + "</div>"
            )
        except Exception as exc:  # a bug of this chart's figure: the others are still written
            chart.figure, chart.error, chart.about = None, describe_error(exc), LEFT_OUT
    if chart.error is not None:
        body = (
            f'<p class="note warning">{e(chart.title)}: left out, could not be drawn: '
            f"{e(chart.error)}</p>"
        )
    elif body is None:
        body = (
            chart.html
            if chart.html is not None
            else (f'<p class="note">{e(chart.note or "Nothing to show.")}</p>')
        )
    return (
        f'<section id="{chart.key}"><h2>{e(chart.title)}</h2>'
        f'<p class="about">{e(chart.about)}</p>{body}</section>'
    )


def best_trial(trials: pd.DataFrame) -> pd.Series | None:
    """The complete trial with the lowest val_bpb."""
    done = trials[(trials["outcome"] == outcomes.COMPLETE) & trials["val_bpb"].notna()]
    return None if done.empty else done.loc[done["val_bpb"].idxmin()]


def summary(data: StudyResults) -> str:
    e = html.escape
    trials = data.trials
    counts = trials["outcome"].value_counts()
    chips = "".join(
        f'<span class="chip" style="background:{outcome_color(o)}">{e(o)}: {counts[o]:,}</span>'
        for o in outcome_order(counts.index)
    )
    objectives = ", ".join(
        f"{e(name)} ({e(d)})" for name, d in zip(data.objectives, data.directions, strict=False)
    )
    extras = []
    budget = data.user_attrs.get(rc.STUDY_MEMORY_BUDGET)
    if isinstance(budget, (int, float)) and budget > 0:
        extras.append(f"memory budget {budget / 2**30:.2f} GiB")
    factor = data.user_attrs.get(rc.STUDY_CALIBRATION)
    if isinstance(factor, (int, float)):
        extras.append(f"memory calibration x{factor:.2f}")
    carried = trials["carried_from"].dropna() if "carried_from" in trials else pd.Series()
    if len(carried):
        sources = sorted({str(c).rsplit("#", 1)[0] for c in carried})
        extras.append(f"{len(carried):,} trials carried from {', '.join(sources)} (not run here)")
    jobs = trials["slurm_job"].dropna() if "slurm_job" in trials else pd.Series()
    if len(jobs):  # which Slurm job array(s) ran the study's trials (--engine slurm)
        arrays = sorted({str(j).split("_", 1)[0] for j in jobs})
        extras.append(f"{len(jobs):,} trials ran as Slurm jobs of {', '.join(arrays)}")
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    best = best_trial(trials)
    best_html = "<p>No trial has completed yet.</p>"
    if best is not None:
        front = pareto.data(trials, "peak_mem_bytes")
        rows = [
            ("trial", f"{int(best['number'])}"),
            ("val_bpb", f"{best['val_bpb']:.4f}"),
            ("val loss", _fmt(best["val_loss"], "{:.4f} nats/token")),
            ("peak memory", _fmt(best["peak_mem_bytes"] / MIB, "{:,.1f} MiB")),
            ("wall time", _fmt(best["wall_s"], "{:.1f} s")),
            ("parameters", _fmt(best["params_total"], "{:,.0f}")),
            ("Pareto-optimal trials (val_bpb, memory)", f"{int(front['on_front'].sum())}"),
        ]
        if front.empty:  # no trial measured its memory: no front to count
            rows.pop()
        if isinstance(best.get("slurm_job"), str):
            rows.insert(1, ("Slurm job", best["slurm_job"]))
        config = json.loads(best["config_json"]) if isinstance(best["config_json"], str) else {}
        config_rows = "".join(
            f"<tr><th>{e(str(k))}</th><td>{e(json.dumps(v))}</td></tr>" for k, v in config.items()
        )
        best_html = (
            '<div class="best"><div><h3>Best trial (lowest val_bpb, complete)</h3><table>'
            + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
            + "</table></div>"
            + (f"<div><h3>Its config</h3><table>{config_rows}</table></div>" if config_rows else "")
            + "</div>"
        )
    return f"""<header>
<h1>Study <code>{e(data.name)}</code></h1>
<div class="meta">storage <code>{e(data.storage)}</code> · objectives {objectives or "none"} ·
{len(trials):,} trials{"".join(" · " + e(x) for x in extras)} · generated {generated}</div>
<div class="outcomes">{chips}</div>
{best_html}
</header>"""


def summary_many(studies: list[StudyResults]) -> str:
    """The header of a cross-study report: one row per study, in its chart colour."""
    e = html.escape
    rows = []
    for i, data in enumerate(studies):
        trials = data.trials
        counts = trials["outcome"].value_counts()
        chips = "".join(
            f'<span class="chip" style="background:{outcome_color(o)}">{e(o)}: {counts[o]:,}</span>'
            for o in outcome_order(counts.index)
        )
        best = best_trial(trials)
        best_text = "-" if best is None else f"{best['val_bpb']:.4f} (trial {int(best['number'])})"
        rows.append(
            f'<tr><th><span class="chip" style="background:{compare.study_color(i)}">'
            f"{e(data.name)}</span></th><td>{len(trials):,}</td><td>{chips}</td>"
            f"<td>{e(best_text)}</td></tr>"
        )
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    names = ", ".join(f"<code>{e(d.name)}</code>" for d in studies)
    warnings = "".join(f'<p class="note warning">{e(w)}</p>' for w in comparison_warnings(studies))
    return f"""<header>
<h1>Studies {names}</h1>
<div class="meta">storage <code>{e(studies[0].storage)}</code> · generated {generated}</div>
{warnings}
<table class="studies"><tr><th>study</th><th>trials</th><th>outcomes</th>
<th>best val_bpb (complete)</th></tr>{"".join(rows)}</table>
</header>"""


def corpus_of(data: StudyResults) -> str | None:
    """The corpus directory a study trained on, from the spec it stored (None: unknown)."""
    corpus = (data.user_attrs.get(rc.STUDY_SPEC) or {}).get("corpus")
    if not isinstance(corpus, dict):
        return None
    where = corpus.get("dir") or corpus.get("out")
    return str(where) if where else json.dumps(corpus, sort_keys=True)


def comparison_warnings(studies: list[StudyResults]) -> list[str]:
    """What makes the studies' shared axes misleading: different corpora (bits per byte of
    different text: a lower val_bpb may be an easier corpus), different tokenizers (val_bpb
    compares them; per-token loss does not)."""
    out = []
    corpora = {s.name: corpus_of(s) for s in studies}
    if len({c for c in corpora.values() if c is not None}) > 1:
        shown = "; ".join(f"{n}: {c}" for n, c in corpora.items() if c is not None)
        out.append(
            f"These studies trained on different corpora ({shown}): their val_bpb are "
            "bits per byte of different text, so a lower value may be an easier corpus, "
            "not a better model."
        )
    tokenizers = {
        s.name: ", ".join(sorted(map(str, s.trials["tokenizer"].dropna().unique())))
        for s in studies
        if "tokenizer" in s.trials
    }
    if len(set(tokenizers.values())) > 1:
        shown = "; ".join(f"{n}: {t or 'unknown'}" for n, t in tokenizers.items())
        out.append(
            f"These studies used different tokenizers ({shown}): val_bpb compares them, "
            "loss per token does not."
        )
    return out


def _fmt(value: Any, pattern: str) -> str:
    if value is None or pd.isna(value):
        return "-"
    return pattern.format(float(value))
