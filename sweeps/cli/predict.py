"""``sweeps predict``: the compute-optimal model of a ``[scaling]`` study at a larger budget, its
predicted val_bpb with intervals (``sweeps.predict``, ``sweeps.loss_fit``); ``--verify`` stores
the prediction on study ``STUDY-verify``, trains its one trial through the same run pipeline and
engines as ``sweeps run`` (``sweeps.pipeline``), and says whether the measured value fell inside.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sweeps.cli.options import (
    AddressOption,
    EngineOption,
    GraceOption,
    HeartbeatOption,
    JsonOption,
    LauncherOption,
    RunsDirOption,
    StorageOption,
)
from sweeps.console import plain
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S

app = typer.Typer()


@app.command()
def predict(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="A [scaling] study's name.")],
    budget: Annotated[
        float, typer.Option("--budget", metavar="FLOPS", help="Training FLOPs, e.g. 2e13.")
    ],
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Store the prediction, train it as study STUDY-verify, report measured "
            "against predicted (a rerun reports without training again).",
        ),
    ] = False,
    bootstrap: Annotated[
        int, typer.Option("--bootstrap", help="Bootstrap resamples of the fit.")
    ] = 200,
    as_json: JsonOption = False,
    storage: StorageOption = None,
    engine: EngineOption = None,
    address: AddressOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    launcher: LauncherOption = "auto",
    heartbeat: HeartbeatOption = HEARTBEAT_INTERVAL_S,
    grace: GraceOption = GRACE_PERIOD_S,
) -> None:
    """The loss fit L(N, D) = E + A/N^alpha + B/D^beta of STUDY, the compute-optimal size and
    tokens at --budget, and the predicted val_bpb with its interval."""
    from lm.errors import SweepsError
    from sweeps import predict as pr
    from sweeps import results
    from sweeps.storage import resolve_storage_url

    pr.check_budget(budget)
    if bootstrap < 10:
        raise SweepsError(
            f"--bootstrap must be >= 10 (an interval needs resamples), got {bootstrap}"
        )
    url = resolve_storage_url(storage, None)
    name = study + pr.SUFFIX
    held = pr.held_prediction(url, name) if verify else None
    if held is not None:
        pr.check_same_budget(held, budget, name)
        prediction = held
        outcome = pr.verdict(held, results.load(url, name).trials)
        if outcome["measured"] is not None:  # trained already: report, train nothing
            _show(prediction, outcome, as_json)
            return
    else:
        data = results.load(url, study)
        prediction = pr.predict(data, study, budget, n_boot=bootstrap).as_dict()
    if not verify:
        _show(prediction, None, as_json)
        return
    args = (engine, address, runs_dir, launcher, heartbeat, grace)
    # With --json, stdout is the JSON alone: the run's board and summary go to stderr.
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        prediction = _run_verification(url, study, prediction, args)
    outcome = pr.verdict(prediction, results.load(url, name).trials)
    _show(prediction, outcome, as_json)


def _run_verification(
    url: str, source: str, prediction: dict[str, Any], options: tuple[Any, ...]
) -> dict[str, Any]:
    """Open STUDY-verify, store the prediction on it (before any trial starts), run its trial."""
    from sweeps import pipeline, results
    from sweeps import predict as pr
    from sweeps import study as service
    from sweeps.cli.progress import drive
    from sweeps.console import err_console
    from sweeps.engines import EngineOptions
    from sweeps.storage import mask_url

    engine, address, runs_dir, launcher, heartbeat, grace = options
    stored, _ = pr.source_spec(results.load(url, source), source)
    spec = pr.verify_spec(stored, prediction)
    args = pipeline.RunArgs(None, None, runs_dir, launcher, heartbeat, grace)
    args.check()
    _, chosen = pipeline.engine_for(engine, spec, EngineOptions(address, {}))
    pipeline.prepare(spec, chosen, args)
    st, opened, created = service.open_study(
        spec, url, n_trials=None, heartbeat=heartbeat, grace=grace
    )
    prediction = pr.store(opened, prediction)
    err_console.print(
        f"{'created' if created else 'resuming'} study {spec.name!r} in {mask_url(url)}: "
        f"the prediction is stored; training {_size(prediction)} for {prediction['tokens']:,} "
        "tokens",
        highlight=False,
        markup=False,
    )
    drive(chosen, pipeline.job(spec, st, opened, url, args))
    return prediction


def _size(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p["size"].items())


def _show(prediction: dict[str, Any], outcome: dict[str, Any] | None, as_json: bool) -> None:
    if as_json:
        shown = prediction if outcome is None else outcome
        typer.echo(json.dumps(shown, indent=2))
        return
    for line in lines(prediction, outcome):
        typer.echo(plain(line))


def lines(p: dict[str, Any], outcome: dict[str, Any] | None = None) -> list[str]:
    """The prediction (and the verification's verdict) as the terminal shows them."""
    pct = f"{p['confidence'] * 100:.0f} %"
    law = p["law"]
    out = [
        f"loss fit of study {p['study']} ({p['n_trials']} complete trials, {p['n_boot']} "
        f"bootstrap resamples; N = {p['size_column']}, D = tokens_seen, L = {p['metric']}):",
        f"  L(N, D) = {law['E']:.4g} + {law['A']:.4g} / N^{law['alpha']:.3g} + "
        f"{law['B']:.4g} / D^{law['beta']:.3g}   (sd of the log residuals {p['residual_sd']:.3g})",
    ]
    for name, (lo, hi) in p["intervals"].items():
        out.append(f"  {name:>5} = {law[name]:.4g}   {pct} interval {lo:.4g} to {hi:.4g}")
    out += [
        f"at {p['budget']:.3g} training FLOPs (counted as the study counts them, lm.flops):",
        f"  configuration: {_size(p)}  (N = {p['n']:,} non-embedding parameters, "
        f"{p['tokens']:,} tokens)",
        f"  chosen among {p['rule']}",
        f"  predicted {p['metric']} {p['predicted']:.4f}   {pct} interval of the fit "
        f"{p['interval'][0]:.4f} to {p['interval'][1]:.4f}; of one run "
        f"{p['run_interval'][0]:.4f} to {p['run_interval'][1]:.4f}",
    ]
    if p["n_6nd"] is not None:
        out.append(f"  under C = 6 N D instead: N_opt = {p['n_6nd']:.3g}, D_opt = {p['d_6nd']:.3g}")
    out += [f"  note: {n}" for n in p["notes"]]
    if outcome is None:
        return out
    if outcome["measured"] is None:
        return [*out, "verification: the trial has not completed; rerun --verify to resume it"]
    where = "inside" if outcome["inside"] else "outside"
    where_run = "inside" if outcome["inside_run"] else "outside"
    before = (
        "made before the trial started"
        if outcome["made_before_run"]
        else "NOT made before the trial started"
    )
    return [
        *out,
        f"verification (trial {outcome['trial']} of {p['study']}-verify): measured "
        f"{p['metric']} {outcome['measured']:.4f}, predicted {p['predicted']:.4f} "
        f"(error {outcome['error']:+.4f}): {where} the fit's interval, {where_run} one run's; "
        f"the prediction was {before}",
    ]
