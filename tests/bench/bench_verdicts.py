"""Benchmark: were the verdicts right? Every trial a verdict stopped, rerun alone to the end.

A verdict is a prediction ("this configuration will not learn"), and a wrong one costs the search
a good region: the stopped trial is told to the sampler as pruned. For every trial of the given
studies that a verdict on predictions stopped (``lm.outcomes.PREDICTION_VERDICTS``:
``unigram_collapse``, ``stalled``, ``unk_dominated``), this reruns its exact configuration alone
(``sweeps train --config``: same seed, same data, no verdicts) twice: to its own full token budget
and to ``--longer`` times that. A verdict was **right** when both reruns still show the failure
it named, **wrong** when one does not: for ``unigram_collapse`` and ``stalled`` (the model learns
nothing from its context), when a rerun used its context above the unigram at any evaluation
(``mean_kl_to_mean >= max_context_kl`` and ``unigram_gap >= min_unigram_gap``, the study's
limits); for ``unk_dominated``, when the rules (``prediction_verdict``, ``min_steps`` and
``min_lr_sum`` waived) no longer call the rerun's last evaluation that. It also counts by the
rules alone, where a context-free model a few hundredths of a nat above the unigram counts as
having learned.

It then re-judges the stopped trials' own evaluations (the one the verdict was reached at) under
candidate settings of ``min_unigram_gap`` (``--gaps``) and of ``min_lr_sum`` (``--lr-sums``:
the learning rate summed over the steps taken, ``lm.schedule.lr_sum``): which verdicts each
setting would still have reached, against what the reruns showed. That is the table the defaults
are set from. For each stopped trial it prints the learning rate summed when it was judged, and
when its longer rerun first used its context (``mean_kl_to_mean >= max_context_kl``) above the
unigram: how far a slow learner's weights had to be able to move before it left the plateau.
Last, the trials ``min_lr_sum`` spared: complete trials the rules without it would have stopped,
each with what it did in the rest of its own budget (its own run is the ground truth there).

    SWEEPS_STORAGE=sqlite:///data/studies.db python tests/bench/bench_verdicts.py collapse \
        [--longer 4] [--runs-dir runs] [--out runs/bench-verdicts] [--lr-sums 0.25 0.5 1]
    python tests/bench/bench_verdicts.py 'search-tpe-rep*' --storage sqlite:///KEPT/bench.db

Studies are named or given as shell patterns (``search-*``: the studies ``bench_search.py
--keep KEPT`` kept). A run of the benchmark's ``search-*`` studies reruns many small trials
(2 to 20 s each here).

Needs the studies' run directories (``trials/<n>/metrics.jsonl``, where the verdict's evaluation
is) and their database. One rerun at a time, one thread (``SWEEPS_NUM_THREADS=1``); on the
2-core machine a 200k-token rerun of the ``collapse`` study's model takes 1 to 3 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import subprocess
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from lm import outcomes
from lm.config import TrainConfig
from lm.run_files import METRICS_FILE, loads_child
from lm.schedule import lr_sum
from sweeps.spec import CollapseLimits
from sweeps.storage import open_storage, resolve_storage_url
from sweeps.verdicts import collapse, prediction_verdict

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Rerun:
    tokens: int
    last: dict[str, Any]  # the rerun's last evaluation
    verdict: str | None  # what the rules say of it (None: it learned)
    left: dict[str, Any] | None  # its first evaluation that used its context above the unigram


@dataclasses.dataclass
class Stopped:
    study: str
    number: int
    outcome: str
    params: dict[str, Any]
    judged: dict[str, Any]  # the evaluation the verdict was reached at
    limits: CollapseLimits
    reruns: list[Rerun]


def rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [
        r
        for r in (loads_child(line) for line in path.read_text().splitlines() if line.strip())
        if isinstance(r, dict) and "val_loss" in r
    ]


def limits_of(study: optuna.Study) -> CollapseLimits:
    stored = ((study.user_attrs.get("spec") or {}).get("limits") or {}).get("collapse") or {}
    return CollapseLimits(**stored)


def with_lr_sum(history: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows with ``lr_sum`` (a child before it logged it: from the schedule)."""
    cfg = TrainConfig.from_dict(config)
    return [
        r if _number(r.get("lr_sum")) else {**r, "lr_sum": lr_sum(int(r["tokens"]), cfg)}
        for r in history
    ]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def left_plateau(history: list[dict[str, Any]], limits: CollapseLimits) -> dict[str, Any] | None:
    """The first evaluation that uses its context and beats the unigram, or None."""
    return next(
        (
            r
            for r in history
            if _number(r.get("mean_kl_to_mean"))
            and _number(r.get("unigram_gap"))
            and r["mean_kl_to_mean"] >= limits.max_context_kl
            and r["unigram_gap"] >= limits.min_unigram_gap
        ),
        None,
    )


def rerun(config: dict[str, Any], max_tokens: int, out: Path) -> list[dict[str, Any]]:
    """``sweeps train`` on ``config`` with ``max_tokens``; its evaluations (reused when a
    previous run of this benchmark finished it)."""
    done = out / "result.json"
    if not done.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cfg = out.parent / f"{out.name}.config.json"
        # No wall limit: a longer rerun on a busy machine must not end as a timeout.
        cfg.write_text(json.dumps({**config, "max_tokens": max_tokens, "max_wall_s": None}))
        env = {**os.environ, "SWEEPS_NUM_THREADS": os.environ.get("SWEEPS_NUM_THREADS", "1")}
        proc = subprocess.run(
            [sys.executable, "-m", "sweeps", "train", "--config", str(cfg), "--out", str(out)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not done.exists():
            raise SystemExit(f"rerun {out} failed ({proc.returncode}): {proc.stderr[-400:]}")
    return with_lr_sum(rows(out / METRICS_FILE), {**config, "max_tokens": max_tokens})


def judge(row: dict[str, Any], limits: CollapseLimits) -> str | None:
    """What the rules say of ``row``, however early it is (``min_steps`` and ``min_lr_sum``
    waived: the ground truth is what the model predicts at the end, not whether it may be
    judged yet)."""
    return prediction_verdict(
        {**row, "step": max(int(row["step"]), limits.min_steps), "lr_sum": None}, limits
    )


def gated(row: dict[str, Any], limits: CollapseLimits) -> str | None:
    """What the rules say of ``row`` as a study would judge it (``min_lr_sum`` applied)."""
    return prediction_verdict({**row, "step": max(int(row["step"]), limits.min_steps)}, limits)


def histories(
    study: optuna.Study, runs_dir: Path, ended: Collection[str]
) -> Iterator[tuple[FrozenTrial, dict[str, Any], list[dict[str, Any]]]]:
    """Each trial of ``study`` that ended as one of ``ended``, with its config and its
    evaluations (``lr_sum`` filled in, ``with_lr_sum``)."""
    name = study.study_name
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("outcome") not in ended:
            continue
        run_dir = Path(t.user_attrs.get("run_dir") or runs_dir / name / "trials" / str(t.number))
        history = rows(run_dir / METRICS_FILE)
        config = t.user_attrs.get("config")
        if not history or not isinstance(config, dict):
            print(f"{name} #{t.number}: no metrics.jsonl or config; skipped")
            continue
        yield t, config, with_lr_sum(history, config)


def stopped_trials(study: optuna.Study, runs_dir: Path, longer: int, out: Path) -> list[Stopped]:
    name, limits = study.study_name, limits_of(study)
    found = []
    for t, config, history in histories(study, runs_dir, outcomes.PREDICTION_VERDICTS):
        outcome = t.user_attrs["outcome"]
        # The evaluation the verdict was reached at: the child may have written one more before
        # it was stopped.
        step = t.user_attrs.get("last_eval_step")
        if isinstance(step, int):
            history = [r for r in history if r["step"] <= step] or history
        budget = int(config["max_tokens"])
        reruns = []
        for tokens in (budget, budget * longer):
            evals = rerun(config, tokens, out / name / f"{t.number}-{tokens}")
            reruns.append(
                Rerun(tokens, evals[-1], judge(evals[-1], limits), left_plateau(evals, limits))
            )
        found.append(Stopped(name, t.number, outcome, dict(t.params), history[-1], limits, reruns))
    return found


@dataclasses.dataclass
class Spared:
    study: str
    number: int
    params: dict[str, Any]
    verdict: str  # what the rules would have said without min_lr_sum
    at: dict[str, Any]  # the evaluation they would have said it at
    left: dict[str, Any] | None  # its first later evaluation using its context above the unigram
    last: dict[str, Any]


def spared_trials(study: optuna.Study, runs_dir: Path) -> list[Spared]:
    """The complete trials of a study that the rules without ``min_lr_sum`` would have stopped
    (``sweeps.verdicts.collapse`` on each prefix of the history, patience and all): their own
    run to the end is the ground truth, no rerun needed."""
    name, limits = study.study_name, limits_of(study)
    ungated = dataclasses.replace(limits, min_lr_sum=0.0)
    found = []
    for t, _, history in histories(study, runs_dir, (outcomes.COMPLETE,)):
        for i in range(1, len(history) + 1):
            verdict = collapse(history[:i], ungated)
            if verdict is not None and collapse(history[:i], limits) is None:
                found.append(
                    Spared(
                        name,
                        t.number,
                        dict(t.params),
                        verdict.outcome,
                        history[i - 1],
                        left_plateau(history[i:], limits),
                        history[-1],
                    )
                )
                break
    return found


def report_spared(spared: list[Spared]) -> None:
    print(
        f"\nSpared by min_lr_sum: {len(spared)} complete trials the rules without it would "
        "have stopped, and what each did in the rest of its own budget:"
    )
    for s in sorted(spared, key=lambda s: s.at["lr_sum"]):
        lr = f" lr {s.params['lr']:.3g}" if _number(s.params.get("lr")) else ""
        where = (
            f"used its context from step {s.left['step']:,} (lr sum {s.left['lr_sum']:.3g})"
            if s.left
            else "never used its context"
        )
        print(
            f"  {s.study} #{s.number}{lr}: would be `{s.verdict}` at step {s.at['step']:,} "
            f"(lr sum {s.at['lr_sum']:.3g}); {where}; ended at {fmt(s.last)}"
        )
    left = sum(s.left is not None for s in spared)
    print(f"  {left} of {len(spared)} left the plateau within their own budget")


def fmt(row: dict[str, Any]) -> str:
    return (
        f"step {row['step']:,} (lr sum {row['lr_sum']:.3g}): val_bpb {row['val_bpb']:.3f}, "
        f"gap {row['unigram_gap']:+.3f}, ctx {row['mean_kl_to_mean']:.3f}"
        + (
            f", unk argmax {row['unk_argmax_rate']:.0%}"
            if row.get("unk_argmax_rate") is not None
            else ""
        )
    )


def failed(s: Stopped, r: Rerun) -> bool:
    """Whether rerun ``r`` still shows the failure ``s``'s verdict named (see the module)."""
    return r.verdict is not None if s.outcome == outcomes.UNK_DOMINATED else r.left is None


def right(s: Stopped) -> bool:
    return all(failed(s, r) for r in s.reruns)


def report(found: list[Stopped], gaps: list[float], sums: list[float]) -> None:
    print(
        "\n| study | trial | params | verdict | judged at | rerun to its budget | "
        "rerun to x longer | right? |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s in found:
        print(
            f"| {s.study} | {s.number} | {s.params} | `{s.outcome}` | {fmt(s.judged)} | "
            + " | ".join(
                f"{r.tokens:,} tokens, {fmt(r.last)}: {r.verdict or 'no verdict'}"
                + ("" if r.left is None else f", used its context from step {r.left['step']:,}")
                for r in s.reruns
            )
            + f" | {'right' if right(s) else 'wrong'} |"
        )
    print(
        "\nPer verdict (right: both reruns still show the failure; by the rules: their last "
        "evaluations still get a verdict):"
    )
    for outcome in outcomes.PREDICTION_VERDICTS:
        mine = [s for s in found if s.outcome == outcome]
        if mine:
            n_right = sum(right(s) for s in mine)
            by_rules = sum(all(r.verdict is not None for r in s.reruns) for s in mine)
            print(
                f"  {outcome}: {n_right} right, {len(mine) - n_right} wrong; by the rules "
                f"{by_rules} right, {len(mine) - by_rules} wrong"
            )
    print(
        "\nThe learning rate summed when judged, and when the longer rerun left the plateau "
        "(its first evaluation using its context above the unigram):"
    )
    for s in sorted(found, key=lambda s: s.judged["lr_sum"]):
        left = s.reruns[-1].left
        where = (
            f"left at step {left['step']:,}, lr sum {left['lr_sum']:.3g}"
            if left
            else "never left it"
        )
        lr = f" lr {s.params['lr']:.3g}" if _number(s.params.get("lr")) else ""
        print(
            f"  {s.study} #{s.number}{lr}: `{s.outcome}` at step "
            f"{s.judged['step']:,}, lr sum {s.judged['lr_sum']:.3g}; {where}; "
            f"{'right' if right(s) else 'wrong'}"
        )
    print(
        "\nRe-judging each stopped trial's own evaluation with min_unigram_gap set to "
        "(min_lr_sum waived):"
    )
    for gap in gaps:
        kept = [
            s for s in found if judge(s.judged, dataclasses.replace(s.limits, min_unigram_gap=gap))
        ]
        tally(gap, found, kept)
    print(
        "\nRe-judging each stopped trial's own evaluation with min_lr_sum set to (at its "
        "study's min_unigram_gap; spared: no longer stopped there):"
    )
    for bound in sums:
        tally(
            bound,
            found,
            [s for s in found if gated(s.judged, dataclasses.replace(s.limits, min_lr_sum=bound))],
        )


def tally(setting: float, found: list[Stopped], kept: list[Stopped]) -> None:
    spared = [s for s in found if s not in kept]
    n_right = sum(right(s) for s in kept)
    learned = sum(not right(s) for s in spared)
    print(
        f"  {setting:g}: {len(kept)} of {len(found)} still stopped, {n_right} of them right "
        f"and {len(kept) - n_right} wrong; of the {len(spared)} spared, {learned} learned in "
        "a rerun"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("studies", nargs="+")
    p.add_argument("--storage", default=None)
    p.add_argument("--runs-dir", type=Path, default=Path("runs"))
    p.add_argument("--out", type=Path, default=Path("runs/bench-verdicts"))
    p.add_argument("--longer", type=int, default=4)
    p.add_argument("--gaps", type=float, nargs="+", default=[0.05, 0.02, 0.0])
    p.add_argument("--lr-sums", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0, 2.0])
    a = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = resolve_storage_url(a.storage, None)
    storage = open_storage(url)
    names = optuna.get_all_study_names(storage)
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in a.studies)]
    missing = [p for p in a.studies if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if missing:
        raise SystemExit(f"no study matches {', '.join(missing)} in {url}")
    studies = [optuna.load_study(study_name=name, storage=storage) for name in sorted(chosen)]
    report(
        [s for study in studies for s in stopped_trials(study, a.runs_dir, a.longer, a.out)],
        a.gaps,
        a.lr_sums,
    )
    report_spared([s for study in studies for s in spared_trials(study, a.runs_dir)])


if __name__ == "__main__":
    main()
