"""The study service the CLI calls: the corpus a spec names, opening, creating or joining a study
in a database, and the rows ``sweeps status`` and ``sweeps trials`` show. No printing, no Typer.

The storage URL is ``--storage``, else ``$SWEEPS_STORAGE``, else the spec's ``[study] storage``,
else ``sqlite:///sweeps.db`` (``sweeps.storage.resolve_storage_url``); it is masked in every
message. Optuna, SQLAlchemy and the workers are imported inside the functions, so ``sweeps
--help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lm import outcomes
from lm.corpus import MANIFEST_NAME
from lm.errors import SweepsError, closest
from sweeps import record as rc
from sweeps.launchers import LAUNCHER_KINDS
from sweeps.record import TrialRecord
from sweeps.spec import objective_names

if TYPE_CHECKING:
    import optuna

    from lm.corpus import Progress
    from sweeps.spec import StudySpec


def check_run_options(
    workers: int | None, n_trials: int | None, heartbeat: int, grace: int, launcher: str
) -> None:
    """The options of ``sweeps run`` and ``sweeps worker``, before anything is opened
    (``workers``: the cap on concurrent trials, None for none)."""
    if workers is not None and workers < 1:
        raise SweepsError(f"--max-concurrent (or --workers) must be >= 1, got {workers}")
    if n_trials is not None and n_trials < 1:
        raise SweepsError(f"--n-trials must be >= 1, got {n_trials}")
    if heartbeat < 1 or grace <= heartbeat:
        raise SweepsError(
            f"--grace ({grace}) must be longer than --heartbeat ({heartbeat}), and --heartbeat >= 1"
        )
    if launcher not in LAUNCHER_KINDS:
        raise SweepsError(f"--launcher must be auto, fork or subprocess, got {launcher!r}")


def check_n_trials(spec: StudySpec, n_trials: int | None) -> None:
    """``--n-trials`` against the spec: an IsoFLOP grid runs at most its cells."""
    from sweeps.spec.rules import too_many_cells

    problem = None if n_trials is None else too_many_cells(spec, n_trials)
    if problem is not None:
        raise SweepsError(
            f"--n-trials is {n_trials}, but {problem}; use at most the grid's "
            "cells or leave --n-trials out"
        )


def concurrency_cap(workers: int | None, max_concurrent: int | None) -> int | None:
    """``--max-concurrent`` or its older name ``--workers``: one cap, or None (the host's)."""
    if workers is not None and max_concurrent is not None and workers != max_concurrent:
        raise SweepsError(
            f"--workers {workers} and --max-concurrent {max_concurrent} disagree; "
            "give one of them (they mean the same)"
        )
    return max_concurrent if max_concurrent is not None else workers


def check_runs_dir(runs_dir: Path) -> None:
    """Trials can write under ``runs_dir`` (checked before a study is created, so a read-only
    or full disk is one line, not a study whose every trial fails). Nothing is left behind: the
    probe goes in the nearest directory that exists."""
    import tempfile

    existing = Path(os.path.abspath(runs_dir))
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SweepsError(
            f"--runs-dir {runs_dir}: {existing} is not a directory; give a "
            "directory where trials can write"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".sweeps-probe-") as probe:
            probe.write(b"x" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise SweepsError(
            f"--runs-dir {runs_dir} is not writable ({exc.strerror or exc}); "
            "free space or give a writable --runs-dir"
        ) from None


# --- the corpus ----------------------------------------------------------------------------------


def corpus_to_prepare(spec: StudySpec) -> bool:
    """Whether the spec's corpus must be prepared first (it names a source, and its dir holds
    no corpus yet)."""
    return spec.corpus.needs_prepare and not (spec.corpus.dir / MANIFEST_NAME).is_file()


def prepare_corpus(spec: StudySpec, progress: Progress | None = None) -> dict[str, Any]:
    """Prepare the spec's corpus into its dir; returns the manifest."""
    from lm import corpus

    c = spec.corpus
    return corpus.prepare(
        c.dir,
        sources=c.source,
        format=c.format,
        synthetic_size=c.synthetic_size,
        seed=c.synthetic_seed,
        val_fraction=c.val_fraction,
        progress=progress,
    )


def check_corpus(spec: StudySpec) -> None:
    """The spec's corpus dir holds a corpus (``SweepsError`` naming what is missing)."""
    from lm import corpus

    corpus.load_manifest(spec.corpus.dir)


#: Combinations of tokenizer settings and ``seq_len`` values checked against the corpus; a space
#: wider than this is checked on its first ones (each check is two stats and two small reads).
_FIT_PROBES = 1000


def check_corpus_fits(spec: StudySpec) -> None:
    """Every ``seq_len`` the spec can ask for fits a window in both splits of its corpus with
    each tokenizer it can ask for (``SweepsError`` naming the value and the fix otherwise). A
    split is judged by ``lm.tokens.token_ceiling``: exact when the token cache exists, else an
    upper bound, so nothing that could run is refused; what this cannot see ends as outcome
    ``too_little_data`` in the child. Nothing is checked while the corpus is still to prepare."""
    import itertools

    from lm.config import TrainConfig, default_vocab_size
    from lm.tokenizers import validate_tokenizer_args
    from lm.tokens import token_ceiling

    if not (spec.corpus.dir / MANIFEST_NAME).is_file():
        return
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    space = {p.name: p for p in spec.space}
    design = spec.design

    def values(name: str) -> list[Any]:
        if design is not None and name in design.param_names:
            return list(design.choices(name))
        if name in space:
            return space[name].probe_values()
        return [spec.fixed.get(name, defaults[name])]

    names = ("tokenizer", "vocab_size", "lowercase", "seq_len")
    combos = itertools.product(*(values(n) for n in names))
    for kind, vocab, lower, seq_len in itertools.islice(combos, _FIT_PROBES):
        if vocab is None:  # left out: it follows the tokenizer
            vocab = default_vocab_size(kind)
        try:
            validate_tokenizer_args(kind, vocab, lower)
        except SweepsError:
            continue  # no such tokenizer: the spec's own checks say so where it matters
        counts = token_ceiling(spec.corpus.dir, kind, int(vocab), bool(lower))
        for split, n in (("training", counts.train_tokens), ("validation", counts.val_tokens)):
            if n is not None and n < int(seq_len) + 1:
                where = "[space]" if "seq_len" in space else "the spec"
                raise SweepsError(
                    f"seq_len={seq_len} from {where} cannot run on corpus {spec.corpus.dir}: "
                    f"its {split} split holds at most {n:,} tokens with tokenizer {kind!r} "
                    f"(vocab_size {vocab}), fewer than seq_len + 1 = {int(seq_len) + 1:,}; "
                    f"use seq_len {max(n - 1, 1):,} or less, or a bigger corpus"
                )


# --- studies -------------------------------------------------------------------------------------


def open_existing(url: str) -> Any:
    """Optuna's storage on a database that must already exist, opened read-only (read-only
    commands): a SQLite file is neither created nor changed, even on a read-only mount."""
    from sweeps import storage as st_mod

    return st_mod.read_only_storage(url)


def open_study(
    spec: StudySpec,
    url: str,
    *,
    n_trials: int | None,
    heartbeat: int,
    grace: int,
    from_study: str | None = None,
) -> tuple[Any, optuna.Study, bool]:
    """Create the spec's study (with its enqueued trials, and with ``from_study``'s finished
    trials carried over: ``sweeps.warm_start``) or resume it: (storage, the study as workers use it,
    whether it was created)."""
    from sweeps import storage as st_mod
    from sweeps import warm_start
    from sweeps import workers as wk

    st = st_mod.open_storage(
        url, heartbeat_interval=heartbeat, grace_period=grace, max_retries=spec.limits.max_retries
    )
    from sweeps import optuna_compat

    optuna_compat.quiet_optuna()
    carry = None if from_study is None else warm_start.read(st, spec, from_study, url)
    _, created = wk.create_or_resume(spec, st, n_trials=n_trials, carry=carry)
    return st, load_study(st, spec.name, url, spec), created


def join_study(
    name: str, url: str, *, heartbeat: int, grace: int
) -> tuple[StudySpec, Any, optuna.Study]:
    """A study started by ``sweeps run``, its spec read from the database: (spec, storage,
    the study as workers use it). Its corpus is the caller's to prepare or check."""
    import os

    from sweeps import storage as st_mod
    from sweeps import workers as wk

    plain = open_existing(url)
    spec = wk.spec_from_study(load_study(plain, name, url))
    plain.engine.dispose()
    st = st_mod.open_storage(
        url, heartbeat_interval=heartbeat, grace_period=grace, max_retries=spec.limits.max_retries
    )
    # A joining process draws its own random numbers, not the first worker's. Not its pid: the
    # seed is the spec's + trials run + this, and two tasks of a Slurm array start together,
    # with pids a few apart and counts of trials run a few apart: pid + count collided, and
    # the two workers drew the same parameters.
    extra = int.from_bytes(os.urandom(4), "little")
    return spec, st, load_study(st, name, url, spec, extra_seed_offset=extra)


def load_study(
    st: Any, name: str, url: str, spec: StudySpec | None = None, extra_seed_offset: int = 0
) -> optuna.Study:
    """The study ``name``; with ``spec``, with the spec's sampler and pruner, seeded past the
    trials already run (a resumed run must not replay the first run's random draws)."""
    import optuna
    from optuna.trial import TrialState

    from sweeps import optuna_compat
    from sweeps import storage as st_mod
    from sweeps import workers as wk

    optuna_compat.quiet_optuna()
    try:
        plain = optuna.load_study(study_name=name, storage=st)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(st, include_best_trial=False)]
        hint = closest(name, names)
        raise SweepsError(
            f"no study {name!r} in {st_mod.mask_url(url)}"
            + (f" (did you mean {hint!r}?)" if hint else "")
            + "; start it with `sweeps run SPEC`, or list studies with "
            "`sweeps status`"
        ) from None
    if spec is None:
        return plain
    ran = sum(t.state != TrialState.WAITING for t in plain.get_trials(deepcopy=False))
    return wk.load_for_workers(spec, st, seed_offset=ran + extra_seed_offset)


def budget_warnings(
    spec: StudySpec, overrides: dict[str, Any] | None = None, samples: int = 200
) -> list[str]:
    """``TrainConfig.budget_warnings`` over the spec's space (its grid, or a seeded sample;
    ``overrides`` as ``sweeps estimate SPEC --<field>`` applies them), one line per kind, with
    how many of the points it holds for."""
    from sweeps.plan import overridden, sample_points
    from sweeps.space import trial_config

    points, how = sample_points(spec, samples, 0)
    found: dict[str, list[str]] = {}  # the field a warning is about -> its messages
    valid = 0
    for point in points or [{}]:
        try:
            cfg = trial_config(spec, point)
            if overrides:
                cfg = overridden(spec, point, cfg, overrides)
        except SweepsError:
            continue
        valid += 1
        for warning in cfg.budget_warnings():
            found.setdefault(warning.split(" ", 1)[0], []).append(warning)
    return [
        messages[0]
        if len(messages) == valid == 1
        else f"{len(messages)} of {valid} points of the {how}, e.g. {messages[0]}"
        for messages in found.values()
    ]


# --- rows for status and trials ------------------------------------------------------------------


#: Each objective's unigram baseline (``record.UNIGRAM_BASELINE``).
UNIGRAM_BASELINE = rc.UNIGRAM_BASELINE


def best_trial(study: optuna.Study, trials: list[Any] | None = None) -> Any:
    """The best COMPLETE trial of a one-objective study, else None."""
    trials = trials if trials is not None else study.get_trials(deepcopy=False)
    return _best_of(study.directions, trials)


def _best_of(directions: list[Any], trials: list[Any]) -> Any:
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    if not complete or len(directions) != 1:
        return None
    pick = min if directions[0] == StudyDirection.MINIMIZE else max
    return pick(complete, key=lambda t: t.values[0])


def best_baseline(study: optuna.Study, best: Any) -> float | None:
    """The best trial's unigram baseline in the objective's unit (None for other objectives):
    "best 3.62" means little until it stands beside the 3.68 of predicting the frequencies."""
    return _baseline(study.user_attrs.get(rc.STUDY_SPEC), best)


def _baseline(spec: Any, best: Any) -> float | None:
    name = objective_names(spec, 1)[0]
    value = TrialRecord.from_trial(best).get(UNIGRAM_BASELINE.get(name, ""))
    return float(value) if isinstance(value, (int, float)) else None


def best_text(study: optuna.Study, trials: list[Any] | None = None) -> str:
    """The best value with its unigram baseline (one objective) or the Pareto front's size."""
    trials = trials if trials is not None else study.get_trials(deepcopy=False)
    return _best_text(
        study.directions, study.user_attrs.get(rc.STUDY_SPEC), trials, best_trial(study, trials)
    )


def _best_text(directions: list[Any], spec: Any, trials: list[Any], best: Any) -> str:
    """``best_text`` of ``trials``, ``best`` their best trial as a whole (``_best_of``'s pick,
    with its attributes: a summary trial lacks the baseline)."""
    from optuna.trial import TrialState

    from sweeps import optuna_compat

    if not any(t.state == TrialState.COMPLETE and t.values for t in trials):
        return "-"
    if best is None:
        return f"{len(optuna_compat.pareto_front(trials, directions))} trials on the Pareto front"
    baseline = _baseline(spec, best)
    shown = "" if baseline is None else f"; unigram {baseline:.4f}"
    return f"{best.values[0]:.4f} (trial {best.number}{shown})"


def outcome_counts(trials: list[Any], *, finished_only: bool = False) -> Counter[str]:
    """Trials by shown outcome, retried ones (superseded by their re-run) left out."""
    from sweeps import workers as wk

    gone = wk.superseded_numbers(trials)
    return Counter(
        wk.trial_outcome(t)
        for t in trials
        if t.number not in gone and (t.state.is_finished() or not finished_only)
    )


def ordered_counts(counts: Counter[str]) -> dict[str, int]:
    """Non-zero counts in the outcome vocabulary's order."""
    return {o: counts[o] for o in outcomes.ORDER if counts[o]}


def study_rows(st: Any) -> list[dict[str, Any]]:
    """One summary per study in the database (``sweeps status``), read with plain SQL in one
    read transaction (``optuna_compat.summary_trials``: states, values and the few attributes a
    summary counts, never every trial in full; of the best trial its whole record); a study
    with a damaged stored value gets a row saying so instead of failing every study's."""
    import sqlalchemy as sa

    from sweeps import storage as st_mod
    from sweeps.optuna_compat import STUDIES_TABLE

    out = []
    with st_mod.read_transaction(st.engine) as conn:
        # Each study read on its own: one damaged value must not fail every study's row.
        studies = conn.execute(
            sa.select(STUDIES_TABLE.c.study_id, STUDIES_TABLE.c.study_name).order_by(
                STUDIES_TABLE.c.study_id
            )
        ).all()
        for study_id, name in studies:
            try:
                out.append(_study_row(st, conn, study_id, name))
            except ValueError as exc:  # a stored JSON value that is not JSON
                out.append(
                    {
                        "study": name,
                        "n_trials": 0,
                        "finished": 0,
                        "retried": 0,
                        "outcomes": {},
                        "best": f"unreadable: a stored value is damaged "
                        f"({str(exc)[:80]}); `sweeps delete {name}` removes it",
                        "best_value": None,
                        "best_unigram_baseline": None,
                        "calibration_factor": 1.0,
                        "memory_budget_bytes": None,
                    }
                )
    return out


def _study_row(st: Any, conn: Any, study_id: int, name: str) -> dict[str, Any]:
    """One study's ``sweeps status`` summary; ValueError when a stored value is damaged."""
    from sweeps import optuna_compat
    from sweeps import workers as wk

    attrs = optuna_compat.study_user_attrs(conn, study_id)
    directions = optuna_compat.study_directions(conn, study_id)
    # What a summary counts of each trial besides its state and values: its outcome, its
    # retries (a superseded trial is not counted) and whether it was carried (``run --from``).
    trials = optuna_compat.summary_trials(
        conn, study_id, user_keys=(rc.OUTCOME, rc.CARRIED_FROM), system_keys=("retry_history",)
    )
    spec = attrs.get(rc.STUDY_SPEC)
    spec_n = (spec or {}).get("study", {}).get("n_trials")
    n_trials = attrs.get(rc.STUDY_N_TRIALS) or spec_n or len(trials)
    state = wk.budget_state(trials, int(n_trials))
    best = _best_of(directions, trials)
    if best is not None:
        best = st.get_trial(optuna_compat.trial_id(best))  # the one trial read whole
    return {
        "study": name,
        "n_trials": int(n_trials),
        "finished": state.finished,
        "retried": len(wk.superseded_numbers(trials)),
        "outcomes": ordered_counts(outcome_counts(trials)),
        "best": _best_text(directions, spec, trials, best),
        "best_value": None if best is None else best.values[0],
        "best_unigram_baseline": None if best is None else _baseline(spec, best),
        "calibration_factor": float(attrs.get(rc.STUDY_CALIBRATION, 1.0)),
        "memory_budget_bytes": attrs.get(rc.STUDY_MEMORY_BUDGET),
    }


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial (``sweeps trials``)."""
    from sweeps import workers as wk

    trials = study.get_trials(deepcopy=False)
    gone = wk.superseded_numbers(trials)
    rows = []
    for t in trials:
        a = TrialRecord.from_trial(t)
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                # A queued trial has no parameters yet, only those it will be asked with.
                "params": dict(t.params) or dict(t.system_attrs.get("fixed_params") or {}),
                "outcome": wk.trial_outcome(t),
                "retried": t.number in gone,
                "reason": a.reason
                or (
                    "failed by a heartbeat: its worker stopped" if t.state.name == "FAIL" else None
                ),
                "val_bpb": a.val_bpb,
                "unigram_bpb": a.unigram_bpb,
                "peak_mem_bytes": a.peak_mem_bytes,
                "wall_s": a.wall_s,
                "flops": a.flops,
                "slurm_job": a.slurm_job,
                "values": t.values,
            }
        )
    return rows
