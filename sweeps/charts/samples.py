"""Generated samples per trial (the latest evaluation's), as an HTML table, every cell escaped:
a sample containing ``<script>`` or ``<Q>`` shows as that text, and its control characters as
the terminal shows them (``\x1b``; newlines and tabs kept: ``sweeps.text.escape_controls``).

Small studies show every trial; big ones the best complete trials plus a few of each other
outcome (a collapsed model's samples are the point of looking).
"""

from __future__ import annotations

import html

import pandas as pd

from lm import outcomes
from sweeps.charts import Chart, outcome_color, outcome_order
from sweeps.results import StudyResults
from sweeps.text import escape_controls

ALL_BELOW = 30
BEST = 10
PER_OUTCOME = 3


def data(
    samples: pd.DataFrame,
    trials: pd.DataFrame,
    *,
    all_below: int = ALL_BELOW,
    best: int = BEST,
    per_outcome: int = PER_OUTCOME,
) -> pd.DataFrame:
    """Rows (trial_number, outcome, val_bpb, tokens, prompt, text): the samples of each chosen
    trial's latest evaluation; complete trials first (best first), then each outcome in the
    legend order, by trial number."""
    columns = ["trial_number", "outcome", "val_bpb", "tokens", "prompt", "text"]
    if samples.empty:
        return pd.DataFrame(columns=columns)
    latest = samples.assign(_t=samples["tokens"].fillna(-1))
    latest = latest[latest["_t"] == latest.groupby("trial_number")["_t"].transform("max")]
    info = trials[["number", "outcome", "val_bpb"]].rename(columns={"number": "trial_number"})
    rows = latest.merge(info, on="trial_number", how="left")
    numbers = rows.drop_duplicates("trial_number")
    if len(numbers) > all_below:
        done = numbers[numbers["outcome"] == outcomes.COMPLETE].nsmallest(best, "val_bpb")
        others = (
            numbers[numbers["outcome"] != outcomes.COMPLETE]
            .sort_values("trial_number")
            .groupby("outcome")
            .head(per_outcome)
        )
        numbers = pd.concat([done, others])
    keep = set(numbers["trial_number"])
    rows = rows[rows["trial_number"].isin(keep)].copy()
    order = {o: i for i, o in enumerate(outcome_order(rows["outcome"].fillna("?")))}
    rows["_group"] = rows["outcome"].fillna("?").map(order)
    rows["_bpb"] = rows["val_bpb"].where(rows["outcome"] == outcomes.COMPLETE)
    rows = rows.sort_values(["_group", "_bpb", "trial_number"], na_position="last", kind="stable")
    return rows[columns].reset_index(drop=True)


def render(rows: pd.DataFrame) -> str:
    """The table's HTML; every value escaped."""

    def cell(value: object, cls: str = "") -> str:
        text = "" if value is None or (isinstance(value, float) and pd.isna(value)) else value
        attr = f' class="{cls}"' if cls else ""
        return f"<td{attr}>{html.escape(escape_controls(str(text), keep_newlines=True))}</td>"

    body = []
    for r in rows.itertuples(index=False):
        bpb = "" if pd.isna(r.val_bpb) else f"{r.val_bpb:.4f}"
        tokens = "" if pd.isna(r.tokens) else f"{int(r.tokens):,}"
        color = outcome_color(str(r.outcome))
        body.append(
            f'<tr>{cell(r.trial_number)}<td><span class="chip" style="background:{color}">'
            f"{html.escape(str(r.outcome))}</span></td>{cell(bpb)}{cell(tokens)}"
            f"{cell(r.prompt, 'text')}{cell(r.text, 'text')}</tr>"
        )
    head = (
        "<tr><th>trial</th><th>outcome</th><th>val_bpb</th><th>tokens</th><th>prompt</th>"
        "<th>generated</th></tr>"
    )
    return f'<table class="samples"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def applies(results: StudyResults) -> bool:
    """Some trial recorded generated samples."""
    return not results.samples.empty


def chart(results: StudyResults) -> Chart:
    title = "Generated samples"
    about = "What each trial writes after its latest evaluation, from the study's fixed prompts."
    rows = data(results.samples, results.trials)
    if rows.empty:
        return Chart("samples", title, about, note="No samples have been recorded.")
    shown = rows["trial_number"].nunique()
    total = results.samples["trial_number"].nunique()
    if shown < total:
        about += (
            f" Showing {shown} of {total} trials: the {BEST} best complete ones and up to "
            f"{PER_OUTCOME} of each other outcome."
        )
    return Chart("samples", title, about, html=render(rows))
