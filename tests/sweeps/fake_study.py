"""Fabricate a study exactly as the runner records it (``sweeps.record``), for report tests.

Trials get plausible values (val_bpb falls with vocabulary and width; a word vocabulary pays for
its ``<unk>``s; logits and attention grow with B x T x V and T^2) and every outcome appears.

``bulk=False`` writes through the public APIs (``study.add_trials``, ``records.record_eval``,
``record_samples``): the real path, ~50 ms a trial. ``bulk=True`` inserts the same rows with one
executemany per table through Optuna's own ORM tables (``optuna.storages._rdb.models``), so a
2,000-trial study takes seconds; ``test_results`` checks both paths give the same frame.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import sqlalchemy as sa
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)
from optuna.trial import TrialState

from lm import flops
from lm.config import TrainConfig, default_vocab_size
from sweeps import record as rc
from sweeps import records
from sweeps import storage as st
from sweeps.conditions import Condition, parse_condition
from sweeps.record import TrialRecord

OUTCOMES = (
    "complete",
    "pruned",
    "predicted_oom",
    "oom",
    "unigram_collapse",
    "diverged",
    "timeout",
    "crashed",
    "interrupted",
)
STATES = {
    "complete": TrialState.COMPLETE,
    "crashed": TrialState.FAIL,
    "interrupted": TrialState.FAIL,
}
BUDGET = 2 * 2**30
EVAL_EVERY = 50_000
MAX_TOKENS = 250_000
PROMPTS = ("<Q>How to raise", "<Q>")
DISTRIBUTIONS = {
    "tokenizer": CategoricalDistribution(["word", "bpe", "byte"]),
    "vocab_size": IntDistribution(260, 8192, log=True),
    "d_ff": CategoricalDistribution([1, 64, 256, 1024]),
    "seq_len": CategoricalDistribution([64, 128, 256, 512]),
    "batch_size": CategoricalDistribution([4, 8, 16, 32, 64]),
    "attention": CategoricalDistribution(["sdpa", "naive"]),
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
}
TRAIN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
#: The fields a ``space=`` study fixes unless ``fixed`` says otherwise (the starter's).
FIXED = {
    "tokenizer": "bpe",
    "vocab_size": 1024,
    "d_ff": 128,
    "seq_len": 64,
    "batch_size": 8,
    "attention": "sdpa",
    "lr": 0.01,
}
WORDS = (
    "the",
    "a",
    "students",
    "teacher",
    "raise",
    "history",
    "war",
    "empire",
    "proof",
    "answer",
    "question",
    "why",
    "how",
    "class",
    "king",
    "<unk>",
)


def config_for(params: dict[str, Any], corpus: str = "/data/corpus") -> dict[str, Any]:
    """The full TrainConfig dict (as lm.config.TrainConfig.to_dict writes it)."""
    return {
        "corpus": corpus,
        "tokenizer": params["tokenizer"],
        "vocab_size": params["vocab_size"],
        "lowercase": False,
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "d_ff": params["d_ff"],
        "seq_len": params["seq_len"],
        "dropout": 0.0,
        "attention": params["attention"],
        "checkpointing": False,
        "tie_weights": True,
        "batch_size": params["batch_size"],
        "grad_accum": 1,
        "lr": params["lr"],
        "weight_decay": 0.1,
        "warmup_tokens": 10_000,
        "max_tokens": MAX_TOKENS,
        "max_wall_s": None,
        "precision": "fp32",
        "grad_clip": 1.0,
        "seed": params.get("seed", 0),
        "eval_every_tokens": EVAL_EVERY,
        "eval_tokens": 16_384,
        "device": "cpu",
        "cpu_memory_limit_bytes": None,
        "sample_prompts": list(PROMPTS),
        "sample_tokens": 16,
    }


def _params(rng: np.random.Generator) -> dict[str, Any]:
    tokenizer = str(rng.choice(["word", "bpe", "byte"], p=[0.4, 0.45, 0.15]))
    vocab = (
        260 if tokenizer == "byte" else int(math.exp(rng.uniform(math.log(300), math.log(8192))))
    )
    return {
        "tokenizer": tokenizer,
        "vocab_size": vocab,
        "d_ff": int(rng.choice([1, 64, 256, 1024])),
        "seq_len": int(rng.choice([64, 128, 256, 512])),
        "batch_size": int(rng.choice([4, 8, 16, 32, 64])),
        "attention": str(rng.choice(["sdpa", "naive"])),
        "lr": float(math.exp(rng.uniform(math.log(1e-4), math.log(1e-1)))),
    }


def _plain(value: Any) -> Any:
    """A numpy scalar drawn by ``rng.choice`` as the Python value a spec holds."""
    return value.item() if isinstance(value, np.generic) else value


def _apply_conditions(p: dict[str, Any], conditions: dict[str, Condition]) -> set[str]:
    """Leave out the parameters whose condition fails, in ``DISTRIBUTIONS`` order, each condition
    read against the draw with the parameters left out before it at their defaults (a later
    parameter's drawn value stands for a field a spec would search first); their config values
    are ``TrainConfig``'s defaults. The names left out."""
    unset = set()
    for name in list(p):
        if name in conditions and not conditions[name].holds(p):
            unset.add(name)
            p[name] = TRAIN_DEFAULTS[name]
            if name == "vocab_size":  # None: the tokenizer's default, as TrainConfig sets it
                p[name] = default_vocab_size(p["tokenizer"])
    return unset


def predicted_bytes(p: dict[str, Any]) -> int:
    """A rough analytic peak: weights/Adam + logits (3 copies) + naive attention's T x T."""
    b, t, v = p["batch_size"], p["seq_len"], p["vocab_size"]
    weights = 16 * (v * 64 + 2 * (4 * 64 * 64 + 2 * 64 * p["d_ff"]))
    logits = 3 * 4 * b * t * v
    attention = (4 * 4 * b * t * t * 2) if p["attention"] == "naive" else 4 * b * t * 64 * 2
    return int(weights + logits + attention + 3 * 4 * b * t * 64 * 2 + 150 * 2**20)


def _quality(p: dict[str, Any], rng: np.random.Generator) -> tuple[float, float, float, float]:
    """(final val_bpb, val_loss per token, bytes per token, unk rate)."""
    v, kind = p["vocab_size"], p["tokenizer"]
    if kind == "byte":
        bpt, unk = 1.0, 0.0
    elif kind == "bpe":
        bpt, unk = 1.6 + 0.9 * math.log(v / 256) / math.log(32), 0.0
    else:
        bpt, unk = 5.4, max(0.01, 0.45 * (1 - math.log(v / 256) / math.log(64)))
    bpb = 1.55 + 0.25 * (kind == "byte") + 0.3 * (p["d_ff"] == 1)
    bpb += 0.15 * abs(math.log10(p["lr"] / 3e-3)) + 8 * unk * 0.35 + rng.normal(0, 0.03)
    return bpb, bpb * bpt * math.log(2), bpt, unk


def fabricate(
    url: str,
    name: str,
    n: int,
    *,
    seed: int = 0,
    bulk: bool = True,
    samples: dict[int, list[dict[str, str]]] | None = None,
    when: dict[str, str] | None = None,
    outcomes: tuple[str, ...] = OUTCOMES,
    attrs: dict[int, dict[str, Any]] | None = None,
    times: dict[int, tuple[datetime.datetime, datetime.datetime]] | None = None,
    space: dict[str, list[Any]] | None = None,
    fixed: dict[str, Any] | None = None,
) -> optuna.Study:
    """A study of ``n`` finished trials written to ``url``: the first ones have ``outcomes``
    (by default the nine that cover every outcome), the rest an outcome their values lead to.

    ``samples`` overrides the generated samples of given trial numbers (e.g. HTML in a sample).
    ``when`` makes parameters conditional, as a spec's ``[space.<name>] when = "..."`` does
    (``{"d_ff": "attention == 'sdpa'"}``, read by ``sweeps.conditions``): a parameter whose
    condition fails for a trial's draw is not suggested (absent from its Optuna params and its
    ``sampled``), and its config holds ``TrainConfig``'s default, as ``sweeps.space`` does.
    ``attrs`` sets (or, with None, removes) user attributes of given trial numbers (where and
    when it ran: ``placed_on``, ``admitted_at``, ...), ``times`` their Optuna ``datetime_start``
    and ``datetime_complete`` (local time, as Optuna stores them).
    ``space`` narrows the search to those parameters, each drawn from its list of choices (a
    spec's ``[space]``: ``{"vocab_size": [512, 1024]}``); every other field is fixed (not
    suggested), at its ``fixed`` value or else ``FIXED``'s (a spec's ``[fixed]``).
    """
    rng = np.random.default_rng(seed)
    storage = st.open_storage(url)
    study = optuna.create_study(
        study_name=name, storage=storage, directions=["minimize", "minimize"]
    )
    study.set_user_attr(rc.STUDY_MEMORY_BUDGET, BUDGET)
    study.set_user_attr(rc.STUDY_CALIBRATION, 1.1)
    study.set_user_attr(
        rc.STUDY_SPEC,
        {
            "study": {
                "name": name,
                "objectives": [
                    {"metric": "val_bpb", "direction": "minimize"},
                    {"metric": "peak_mem", "direction": "minimize"},
                ],
            }
        },
    )
    trials, evals, sample_rows = [], [], []
    now = time.time()
    conditions = {k: parse_condition(v) for k, v in (when or {}).items()}
    dists = (
        DISTRIBUTIONS
        if space is None
        else {k: CategoricalDistribution(list(v)) for k, v in space.items()}
    )
    for number in range(n):
        p = _params(rng)
        unset = _apply_conditions(p, conditions)
        if space is not None:
            p = {**FIXED, **(fixed or {}), **{k: _plain(rng.choice(v)) for k, v in space.items()}}
            unset = set(p) - set(space)
        outcome = outcomes[number] if number < len(outcomes) else None
        trial, trial_evals, trial_samples = _trial(number, p, outcome, rng, now, unset, dists)
        if number in (attrs or {}):
            given = (attrs or {})[number]  # None: the attribute left out
            rec = TrialRecord.from_trial(trial).without(tuple(given))
            rec.merge(TrialRecord.from_attrs({k: v for k, v in given.items() if v is not None}))
            trial.user_attrs = rec.to_attrs()
        if number in (times or {}):
            trial.datetime_start, trial.datetime_complete = (times or {})[number]
        trials.append(trial)
        evals.append(trial_evals)
        sample_rows.append((samples or {}).get(number, trial_samples))
    if bulk:
        ids = _bulk_add_trials(storage, study._study_id, trials)
    else:
        study.add_trials(trials)
        ids = {t.number: t._trial_id for t in study.get_trials(deepcopy=False)}
    engine = storage.engine
    eval_rows, text_rows = [], []
    for number, (trial_evals, trial_samples) in enumerate(zip(evals, sample_rows, strict=True)):
        for metrics in trial_evals:
            if bulk:
                eval_rows.append(_eval_row(name, number, ids[number], metrics))
            else:
                records.record_eval(engine, name, number, ids[number], metrics)
        if trial_evals and trial_samples:
            last = trial_evals[-1]
            if bulk:
                text_rows += [
                    {
                        "study_name": name,
                        "trial_number": number,
                        "trial_id": ids[number],
                        "step": last["step"],
                        "tokens": last["tokens"],
                        "prompt": s["prompt"],
                        "text": s["text"],
                        "recorded_at": now,
                    }
                    for s in trial_samples
                ]
            else:
                records.record_samples(
                    engine,
                    name,
                    number,
                    ids[number],
                    trial_samples,
                    tokens=last["tokens"],
                    step=last["step"],
                )
    if eval_rows or text_rows:
        with engine.begin() as conn:
            if eval_rows:
                conn.execute(records.evals_table.insert(), eval_rows)
            if text_rows:
                conn.execute(records.samples_table.insert(), text_rows)
    engine.dispose()  # close the pool (SQLite checkpoints its WAL); reopened on next use
    return study


def _bulk_add_trials(
    storage: optuna.storages.RDBStorage, study_id: int, trials: list[optuna.trial.FrozenTrial]
) -> dict[int, int]:
    """Insert finished trials with one executemany per Optuna table; {number: trial_id}."""
    from optuna.storages._rdb import models as m

    if not trials:  # a study with no trial yet (an empty executemany inserts one bare row)
        return {}

    def local(d: datetime.datetime | None) -> datetime.datetime | None:
        """As Optuna stores it: naive local time (an aware one converted to it)."""
        return d if d is None or d.tzinfo is None else d.astimezone().replace(tzinfo=None)

    with storage.engine.begin() as conn:
        conn.execute(
            m.TrialModel.__table__.insert(),
            [
                {
                    "number": number,
                    "study_id": study_id,
                    "state": t.state,
                    "datetime_start": local(t.datetime_start),
                    "datetime_complete": local(t.datetime_complete),
                }
                for number, t in enumerate(trials)
            ],
        )
        table = m.TrialModel.__table__
        ids = dict(
            conn.execute(
                sa.select(table.c.number, table.c.trial_id).where(table.c.study_id == study_id)
            ).all()
        )
        params, values, attrs, inter = [], [], [], []
        for number, t in enumerate(trials):  # create_trial leaves number unset (-1)
            tid = ids[number]
            for name, value in t.params.items():
                dist = t.distributions[name]
                params.append(
                    {
                        "trial_id": tid,
                        "param_name": name,
                        "param_value": dist.to_internal_repr(value),
                        "distribution_json": distribution_to_json(dist),
                    }
                )
            for i, value in enumerate(t.values or []):
                stored, kind = m.TrialValueModel.value_to_stored_repr(value)
                values.append(
                    {"trial_id": tid, "objective": i, "value": stored, "value_type": kind}
                )
            attrs += [
                {"trial_id": tid, "key": k, "value_json": json.dumps(v)}
                for k, v in t.user_attrs.items()
            ]
            for step, value in t.intermediate_values.items():
                stored, kind = m.TrialIntermediateValueModel.intermediate_value_to_stored_repr(
                    value
                )
                inter.append(
                    {
                        "trial_id": tid,
                        "step": step,
                        "intermediate_value": stored,
                        "intermediate_value_type": kind,
                    }
                )
        for model, rows in (
            (m.TrialParamModel, params),
            (m.TrialValueModel, values),
            (m.TrialUserAttributeModel, attrs),
            (m.TrialIntermediateValueModel, inter),
        ):
            if rows:
                conn.execute(model.__table__.insert(), rows)
    return ids


def _eval_row(study: str, number: int, trial_id: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """The row ``records.record_eval`` writes, without its one-transaction-per-call cost."""
    row: dict[str, Any] = {
        "study_name": study,
        "trial_number": number,
        "trial_id": trial_id,
        "metrics": json.dumps(metrics, sort_keys=True),
        "recorded_at": 0.0,
    }
    for key in records.EVAL_COLUMNS:
        row[key] = records._column_value(metrics.get(key), integer=key in records._INT_COLUMNS)
    return row


def _pick_outcome(
    p: dict[str, Any], predicted: int, measured: int, rng: np.random.Generator
) -> str:
    if predicted > BUDGET:
        return "predicted_oom"
    if measured > BUDGET:
        return "oom"
    if p["lr"] > 0.05 and rng.random() < 0.5:
        return "diverged"
    if (p["tokenizer"] == "word" and p["vocab_size"] < 500) or (
        p["d_ff"] == 1 and rng.random() < 0.3
    ):
        return "unigram_collapse"
    return str(
        rng.choice(
            ["complete", "pruned", "timeout", "crashed", "interrupted"],
            p=[0.7, 0.22, 0.04, 0.02, 0.02],
        )
    )


def _trial(
    number: int,
    p: dict[str, Any],
    outcome: str | None,
    rng: np.random.Generator,
    now: float,
    unset: frozenset[str] | set[str] = frozenset(),
    dists: dict[str, Any] = DISTRIBUTIONS,
) -> tuple[optuna.trial.FrozenTrial, list[dict], list[dict]]:
    predicted_raw = predicted_bytes(p)
    predicted = int(predicted_raw * 1.1)
    measured = int(predicted_raw * rng.uniform(0.85, 1.25))
    outcome = outcome or _pick_outcome(p, predicted, measured, rng)
    suggested = {k: v for k, v in p.items() if k not in unset}
    bpb, _, bpt, unk = _quality(p, rng)
    entropy = 5.5 if p["tokenizer"] != "byte" else 3.2
    n_evals = {
        "complete": 5,
        "predicted_oom": 0,
        "oom": int(rng.integers(0, 2)),
        "crashed": int(rng.integers(0, 3)),
        "diverged": int(rng.integers(1, 3)),
    }.get(outcome, int(rng.integers(1, 4)))
    tokens_per_s = 2e7 / (p["seq_len"] * (p["vocab_size"] / 1000 + 2)) * rng.uniform(0.8, 1.2)
    collapsed = outcome == "unigram_collapse"
    evals = []
    for k in range(1, n_evals + 1):
        tokens = k * EVAL_EVERY
        frac = math.exp(-2.5 * k / 5)
        # A collapsed model sits just under the unigram baseline, whatever it trains on.
        val_bpb = bpb + 0.9 + 0.1 * frac if collapsed else bpb + 1.2 * frac
        val_loss = val_bpb * bpt * math.log(2)
        corpus_p = sorted(rng.dirichlet(np.ones(25) * 0.6), reverse=True)
        model_p = corpus_p if collapsed else list(rng.dirichlet(np.ones(25) * 0.6))
        evals.append(
            {
                "step": tokens // (p["batch_size"] * p["seq_len"]),
                "tokens": tokens,
                "lr": p["lr"],
                "train_loss": val_loss * 0.97,
                "val_loss": val_loss,
                "val_bpb": val_bpb,
                "accuracy": 0.2 + 0.1 * (1 - frac),
                "unigram_entropy": entropy,
                "unigram_bpb": bpb + 1.0,
                "unigram_gap": entropy - val_loss,
                "kl_mean_to_unigram": 0.001 if collapsed else 0.2,
                "mean_kl_to_mean": 0.002 if collapsed else 1.1,
                "top20_overlap": 1.0 if collapsed else 0.6,
                "top_tokens": {
                    "tokens": list(WORDS[: len(WORDS)]) + [f"w{i}" for i in range(9)],
                    "corpus": [round(float(x), 6) for x in corpus_p],
                    "model": [round(float(x), 6) for x in model_p],
                },
                "unk_rate_targets": unk,
                "unk_rate_samples": unk,
                "peak_mem_bytes": measured,
                "tokens_per_s": tokens_per_s,
                "elapsed_s": tokens / tokens_per_s + 3.0,
            }
        )
    last = evals[-1] if evals else {}
    wall_s = (last.get("elapsed_s", 0.0) + rng.uniform(1, 4)) if outcome != "predicted_oom" else 0.0
    reason = {
        "complete": f"trained {MAX_TOKENS:,} tokens",
        "pruned": f"median pruner: val_bpb {last.get('val_bpb', 0):.3f} worse than the median "
        f"at {last.get('tokens', 0):,} tokens",
        "predicted_oom": f"predicted {predicted / 2**30:.2f} GiB > budget 2.00 GiB",
        "oom": "the child exceeded its memory limit (exit 137)",
        "unigram_collapse": "unigram_gap 0.01 < 0.05 after 2 evaluations: predicts corpus "
        "frequencies",
        "diverged": "training loss is nan at step 120",
        "timeout": "max_wall_s=60 reached",
        "crashed": "RuntimeError: something broke",
        "interrupted": "stopped by the user",
    }[outcome]
    rec = TrialRecord(
        outcome=outcome,
        reason=reason,
        run_dir=f"runs/trials/{number}",
        host="worker-a" if number % 2 else "worker-b",
        pid=1000 + number,
        started_at=now - 3600 + number,
        wall_s=wall_s,
        config=config_for(p),
        sampled=suggested,
        predicted_mem_bytes=predicted,
        predicted_mem_raw_bytes=predicted_raw,
        memory_budget_bytes=BUDGET,
        calibration_factor=1.1,
        constraint=1.0 if outcome in ("oom", "predicted_oom") else 0.0,
    )
    if number % 7 == 3:
        rec.fitted = {"batch_size": p["batch_size"], "grad_accum": 2}
    if outcome != "predicted_oom":
        params_total = p["vocab_size"] * 64 + 128 * 64 + 2 * (4 * 64 * 64 + 2 * 64 * p["d_ff"])
        rec.update(
            cold_start_s=2.0,
            peak_mem_bytes=measured,
            tokens_seen=last.get("tokens", 0),
            tokens_per_s=tokens_per_s,
            params_total=params_total,
            params={"total": params_total},
            bytes_per_token=bpt,
            unk_rate=unk,
            train_s=max(wall_s - 3.0, 0.0),
        )
        rec.merge(_compute(p, last.get("tokens", 0), n_evals))
        final = (
            "val_bpb",
            "val_loss",
            "accuracy",
            "unigram_entropy",
            "unigram_bpb",
            "unigram_gap",
            "kl_mean_to_unigram",
            "mean_kl_to_mean",
            "top20_overlap",
            "unk_rate_targets",
        )
        rec.update(**{k: last[k] for k in final if k in last})
        if evals:
            rec.best_val_bpb = min(e["val_bpb"] for e in evals)
    state = STATES.get(outcome, TrialState.PRUNED)
    values = None
    if state == TrialState.COMPLETE:
        values = [last["val_bpb"], float(measured)]
    trial = optuna.trial.create_trial(
        state=state,
        values=values,
        params=suggested,
        distributions={k: dists[k] for k in suggested},
        user_attrs=rec.to_attrs(),
        intermediate_values={e["tokens"]: e["val_bpb"] for e in evals}
        if state == TrialState.PRUNED
        else None,
    )
    texts = [{"prompt": prompt, "text": " ".join(rng.choice(WORDS, size=8))} for prompt in PROMPTS]
    return trial, evals, texts


def _compute(p: dict[str, Any], tokens: int, n_evals: int) -> TrialRecord:
    """What the runner records of a trial's compute (``lm.flops``)."""
    f = flops.count(TrainConfig.from_dict(config_for(p)), tokens, n_evals=n_evals)
    return TrialRecord(
        flops=f.flops,
        flops_per_token=f.flops_per_token,
        params_non_embedding=f.params_non_embedding,
        params_embedding=f.params_embedding,
        eval_flops=f.eval_flops,
    )


def shared_big_study(base: Path, n: int = 2000, seed: int = 2) -> str:
    """The URL of an ``n``-trial study named ``big``, fabricated once per test run under
    ``base`` (the run's directory: the ``big_study`` fixture of ``tests/conftest.py``) and shared
    by the modules and workers that read it."""
    path = base / f"big-{n}-{seed}.db"
    with open(base / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer, the others wait and reuse it
        if not path.exists():
            tmp = base / f".{path.name}.tmp"
            for stale in base.glob(f"{tmp.name}*"):
                stale.unlink()
            fabricate(f"sqlite:///{tmp}", "big", n, seed=seed)
            for suffix in ("-wal", "-shm"):  # normally gone: the last connection checkpoints
                if Path(f"{tmp}{suffix}").exists():
                    Path(f"{tmp}{suffix}").rename(f"{path}{suffix}")
            tmp.rename(path)
    return f"sqlite:///{path}"
