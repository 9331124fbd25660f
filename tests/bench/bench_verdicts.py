"""Benchmark: were the verdicts right? Every trial a verdict stopped, rerun alone to the end.

A verdict is a prediction ("this configuration will not learn"), and a wrong one costs the search
a good region: the stopped trial is told to the sampler as pruned. For every trial of the given
studies that a verdict on predictions stopped (``lm.outcomes.PREDICTION_VERDICTS``:
``unigram_collapse``, ``stalled``, ``unk_dominated``), this reruns its exact configuration alone
(``sweeps train --config``: same seed, same data, no verdicts) twice: to its own full token budget
and to ``--longer`` times that. A verdict was **right** when the rerun's last evaluation still
shows the failure it named, **wrong** when it does not (the model left the plateau, or `<unk>`
stopped dominating): judged by the verdict rules themselves (``prediction_verdict``) at the
study's own limits, with ``min_steps`` waived (a rerun's last evaluation is past it anyway).

It then re-judges the stopped trials' own evaluations (the one the verdict was reached at) under
candidate settings of ``min_unigram_gap`` (``--gaps``): which verdicts each setting would still
have reached, against what the reruns showed. That is the table the defaults are set from.

    SWEEPS_STORAGE=sqlite:///data/studies.db python tests/bench/bench_verdicts.py collapse \
        [--longer 4] [--runs-dir runs] [--out runs/bench-verdicts]
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
from pathlib import Path
from typing import Any

import optuna

from lm import outcomes
from lm.run_files import METRICS_FILE, loads_child
from sweeps.spec import CollapseLimits
from sweeps.storage import open_storage, resolve_storage_url
from sweeps.verdicts import prediction_verdict

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Rerun:
    tokens: int
    last: dict[str, Any]  # the rerun's last evaluation
    verdict: str | None  # what the rules say of it (None: it learned)


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
    return [r for r in (loads_child(line) for line in path.read_text().splitlines()
                        if line.strip()) if isinstance(r, dict) and "val_loss" in r]


def limits_of(study: optuna.Study) -> CollapseLimits:
    stored = ((study.user_attrs.get("spec") or {}).get("limits") or {}).get("collapse") or {}
    return CollapseLimits(**stored)


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
        proc = subprocess.run([sys.executable, "-m", "sweeps", "train", "--config", str(cfg),
                               "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                              text=True)
        if proc.returncode != 0 or not done.exists():
            raise SystemExit(f"rerun {out} failed ({proc.returncode}): {proc.stderr[-400:]}")
    return rows(out / METRICS_FILE)


def judge(row: dict[str, Any], limits: CollapseLimits) -> str | None:
    return prediction_verdict({**row, "step": max(int(row["step"]), limits.min_steps)}, limits)


def stopped_trials(url: str, name: str, runs_dir: Path, longer: int,
                   out: Path) -> list[Stopped]:
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    limits = limits_of(study)
    found = []
    for t in study.get_trials(deepcopy=False):
        outcome = t.user_attrs.get("outcome")
        if outcome not in outcomes.PREDICTION_VERDICTS:
            continue
        run_dir = Path(t.user_attrs.get("run_dir") or runs_dir / name / "trials" / str(t.number))
        history = rows(run_dir / METRICS_FILE)
        config = t.user_attrs.get("config")
        if not history or not isinstance(config, dict):
            print(f"{name} #{t.number}: no metrics.jsonl or config; skipped")
            continue
        budget = int(config["max_tokens"])
        reruns = []
        for tokens in (budget, budget * longer):
            evals = rerun(config, tokens, out / name / f"{t.number}-{tokens}")
            reruns.append(Rerun(tokens, evals[-1], judge(evals[-1], limits)))
        found.append(Stopped(name, t.number, outcome, dict(t.params), history[-1], limits,
                             reruns))
    return found


def fmt(row: dict[str, Any]) -> str:
    return (f"step {row['step']:,}: val_bpb {row['val_bpb']:.3f}, gap {row['unigram_gap']:+.3f}, "
            f"ctx {row['mean_kl_to_mean']:.3f}"
            + (f", unk argmax {row['unk_argmax_rate']:.0%}"
               if row.get("unk_argmax_rate") is not None else ""))


def report(found: list[Stopped], gaps: list[float]) -> None:
    print("\n| study | trial | params | verdict | judged at | rerun to its budget | "
          "rerun to x longer | right? |")
    print("|---|---|---|---|---|---|---|---|")
    for s in found:
        right = all(r.verdict is not None for r in s.reruns)
        print(f"| {s.study} | {s.number} | {s.params} | `{s.outcome}` | {fmt(s.judged)} | "
              + " | ".join(f"{r.tokens:,} tokens, {fmt(r.last)}: "
                           f"{r.verdict or 'learned'}" for r in s.reruns)
              + f" | {'right' if right else 'wrong'} |")
    print("\nPer verdict (right: both reruns still show a failure; wrong: the longer one learned):")
    for outcome in outcomes.PREDICTION_VERDICTS:
        mine = [s for s in found if s.outcome == outcome]
        if mine:
            right = sum(all(r.verdict is not None for r in s.reruns) for s in mine)
            print(f"  {outcome}: {right} right, {len(mine) - right} wrong")
    print("\nRe-judging each stopped trial's own evaluation with min_unigram_gap set to:")
    for gap in gaps:
        right = wrong = kept = 0
        for s in found:
            verdict = judge(s.judged, dataclasses.replace(s.limits, min_unigram_gap=gap))
            if verdict is None:
                continue
            kept += 1
            learned = s.reruns[-1].verdict is None
            wrong += learned
            right += not learned
        print(f"  {gap:g}: {kept} of {len(found)} still stopped; {right} of them right, "
              f"{wrong} wrong (the longer rerun learned)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("studies", nargs="+")
    p.add_argument("--storage", default=None)
    p.add_argument("--runs-dir", type=Path, default=Path("runs"))
    p.add_argument("--out", type=Path, default=Path("runs/bench-verdicts"))
    p.add_argument("--longer", type=int, default=4)
    p.add_argument("--gaps", type=float, nargs="+", default=[0.05, 0.02, 0.0])
    a = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = resolve_storage_url(a.storage, None)
    names = optuna.get_all_study_names(open_storage(url))
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in a.studies)]
    missing = [p for p in a.studies if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if missing:
        raise SystemExit(f"no study matches {', '.join(missing)} in {url}")
    found = [s for name in sorted(chosen)
             for s in stopped_trials(url, name, a.runs_dir, a.longer, a.out)]
    report(found, a.gaps)


if __name__ == "__main__":
    main()
