"""The trial record: every attribute a trial of a study holds, its type, and how it is stored.

A trial's record is what the runner learns about it (``sweeps.runner``: its plan, where it ran,
what its child measured, how it ended) and what the analysis wing reads back (``results``, the
report, ``warm_start``, ``confirm``, ``preflight``'s calibration). In Optuna each field is one
*user attribute* of the trial, named after the field, its value JSON (``lm.run_files.jsonable``:
NaN and infinities stored as null); a field that is None is not stored at all. Nothing but this
module names a trial attribute by a string (``tests/test_conventions.py`` holds it).

``TrialRecord`` checks its own rules, as Optuna's distributions do: ``to_attrs`` refuses a field
of the wrong type (a programming error), while ``from_attrs`` reads whatever a database holds (an
older version's, another writer's): a value of the wrong type, or a key this version does not
know, is kept in ``extra`` and written back as it was, so a copy of a record loses nothing.

The study's own attributes (``study.set_user_attr``) are named at the bottom (``STUDY_*``).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


@dataclass(kw_only=True)
class TrialRecord:
    """A trial's user attributes, typed. Mutable while the runner builds it, checked when
    written (``to_attrs``)."""

    # --- how it ended (``lm.outcomes``) -----------------------------------------------------------
    #: The outcome's name (``lm.outcomes``: complete, pruned, oom, predicted_oom, ...).
    outcome: str | None = None
    #: One line saying why it ended so.
    reason: str | None = None
    #: The memory constraint told to Optuna (``outcomes.constraint_value``: 1.0 for an OOM).
    constraint: float | None = None
    #: The ending was the environment's (a corpus gone, a run dir unwritable): re-queued.
    environment_failure: bool | None = None
    #: What the database refused to store for the trial (its samples, a row, its notes).
    storage_problems: list[str] | None = None
    #: The orchestrator's traceback of an error that crashed the trial (its last 4,000 chars).
    traceback: str | None = None
    #: What the child's files held of the wrong type (the first ten, then how many more).
    child_file_problems: list[str] | None = None

    # --- where and when it ran ------------------------------------------------------------------
    #: The host of the worker that ran it.
    host: str | None = None
    #: The worker process's id.
    pid: int | None = None
    #: When the worker took it up (Unix seconds).
    started_at: float | None = None
    #: When it was admitted to a device (Unix seconds; admission only).
    admitted_at: float | None = None
    #: The device it was admitted to: ``gpu 0``, ``node 1a2b3c4d gpu 0``, ``cpu``.
    placed_on: str | None = None
    #: The bytes reserved for it on that device (admission only).
    reserved_mem_bytes: int | None = None
    #: The Slurm job that ran it, ``ARRAYJOB_TASK`` or ``JOB`` (the Slurm engine's tasks).
    slurm_job: str | None = None
    #: The absolute directory of its run (``<study dir>/trials/<number>``).
    run_dir: str | None = None
    #: The child's process id.
    child_pid: int | None = None
    #: The child's exit code (negative: the signal that ended it).
    returncode: int | None = None
    #: The intra-op threads its CPU child ran (``lm.host.trial_threads``).
    threads: int | None = None
    #: Why that many threads.
    threads_reason: str | None = None
    #: The device the child reports it ran on (``cpu``, ``cuda:0``).
    device: str | None = None
    #: The product name of the GPU it ran on (a CUDA child on a known GPU).
    gpu_name: str | None = None

    # --- what it is -----------------------------------------------------------------------------
    #: The sampled parameters, before fitting (``space.suggest``).
    sampled: dict[str, Any] | None = None
    #: The trained ``TrainConfig`` (``to_dict``), after fitting and the memory limit.
    config: dict[str, Any] | None = None
    #: The micro-batch fitted to memory (``oom_policy = "fit"``): batch_size, grad_accum.
    fitted: dict[str, Any] | None = None
    #: Why the fitted retry ran (the first attempt's OOM reason).
    fit_retry_reason: str | None = None
    #: How many attempts it took (2: a fitted retry; absent: one).
    attempts: int | None = None
    #: The unit of its training budget: tokens, bytes or flops (``TrainConfig.budget_unit``).
    budget_unit: str | None = None
    #: An IsoFLOP cell's compute budget, the one its fit groups it by (``[scaling]``).
    flops_budget: float | None = None
    #: The optimizer steps its budget plans (``verdicts.planned_steps``).
    planned_steps: int | None = None
    #: A note that the budget is too short for the schedule (``verdicts.under_trained_note``).
    under_trained: str | None = None
    #: What share of the text its word vocabulary drops to ``<unk>`` (``verdicts.unk_note``).
    unk_note: str | None = None

    # --- the plan (``sweeps.preflight``) ----------------------------------------------------------
    #: The predicted peak, calibrated, that admission reserves.
    predicted_mem_bytes: int | None = None
    #: The predicted peak before calibration.
    predicted_mem_raw_bytes: int | None = None
    #: The raw prediction of what the child measures (its kind below): calibration's input.
    predicted_peak_mem_raw_bytes: int | None = None
    #: What that prediction measures (``lm.memory.PEAK_*``).
    predicted_peak_mem_kind: str | None = None
    #: The memory budget it was planned against.
    memory_budget_bytes: int | None = None
    #: The calibration factor the plan used.
    calibration_factor: float | None = None
    #: The training FLOPs its configuration predicts (``lm.flops.count``).
    predicted_flops: float | None = None

    # --- what its child measured ----------------------------------------------------------------
    #: The wall-clock seconds of its child (0.0 for a copy).
    wall_s: float | None = None
    #: The seconds in its training loop (tokens / tokens_per_s).
    train_s: float | None = None
    #: Seconds from launch to the child's first line of work.
    cold_start_s: float | None = None
    #: Seconds of the child's setup (data, model) before training.
    setup_s: float | None = None
    #: The measured peak memory.
    peak_mem_bytes: int | None = None
    #: What that peak measures (``lm.memory.PEAK_*``: the child's own, or the parent's RSS poll).
    peak_mem_kind: str | None = None
    #: The training tokens seen.
    tokens_seen: int | None = None
    #: Training throughput.
    tokens_per_s: float | None = None
    #: The model's parameter counts, as the child reports them (``total`` among them).
    params: dict[str, Any] | None = None
    #: ``params["total"]``.
    params_total: int | None = None
    #: The corpus's bytes per token for its tokenizer.
    bytes_per_token: float | None = None
    #: The training bytes seen.
    train_bytes: int | None = None
    #: The share of training tokens that are ``<unk>``.
    unk_rate: float | None = None
    #: The best validation bits per byte of its evaluations.
    best_val_bpb: float | None = None
    #: The optimizer steps taken.
    steps: int | None = None
    #: The tokens of an earlier attempt's checkpoint it resumed from.
    resumed_from_tokens: int | None = None
    #: The step of its last evaluation (the one a verdict was reached at).
    last_eval_step: int | None = None
    #: The values of its cooldown reads per rung (``fidelity``: halving's input).
    rungs: dict[str, Any] | None = None
    #: The tokens of each rung's read.
    rung_tokens: dict[str, Any] | None = None

    # --- its final evaluation (``FINAL_METRICS``) -------------------------------------------------
    #: Validation bits per byte.
    val_bpb: float | None = None
    #: Validation loss (nats per token).
    val_loss: float | None = None
    #: Next-token accuracy.
    accuracy: float | None = None
    #: The entropy of the unigram distribution of the validation text.
    unigram_entropy: float | None = None
    #: The unigram model's bits per byte (the baseline a collapse falls to).
    unigram_bpb: float | None = None
    #: How far below the unigram baseline it is.
    unigram_gap: float | None = None
    #: The mean KL of its predictions to the unigram distribution.
    kl_mean_to_unigram: float | None = None
    #: The mean KL of its predictions to their mean.
    mean_kl_to_mean: float | None = None
    #: The overlap of its top-20 predictions with the unigram top 20.
    top20_overlap: float | None = None
    #: The share of validation targets that are ``<unk>``.
    unk_rate_targets: float | None = None
    #: The share of predictions whose argmax is ``<unk>``.
    unk_argmax_rate: float | None = None
    #: The share of sampled tokens that are ``<unk>``.
    unk_rate_samples: float | None = None
    #: The share of text bytes its vocabulary drops to ``<unk>``.
    unk_byte_rate: float | None = None

    # --- compute (``lm.flops``): FLOPs stay floats (a big run's exceed int64) ---------------------
    #: The training FLOPs of the tokens trained (cooldown reads and evaluations included).
    flops: float | None = None
    #: FLOPs per training token.
    flops_per_token: float | None = None
    #: Parameters outside the embeddings.
    params_non_embedding: int | None = None
    #: Embedding parameters.
    params_embedding: int | None = None
    #: FLOPs spent on evaluations.
    eval_flops: float | None = None
    #: Model FLOPs utilization (a known GPU only).
    mfu: float | None = None

    # --- its history ----------------------------------------------------------------------------
    #: How many times its parameters were re-queued (``liveness.requeue_template``).
    retries: int | None = None
    #: The first trial of its retry history.
    retry_of: int | None = None
    #: The trial whose result it copies: the same parameters (``runner.duplicate_of``).
    copy_of: int | None = None
    #: ``STUDY#N``: the trial it was carried from (``sweeps run --from``).
    carried_from: str | None = None
    #: The table it was replayed from (``sweeps run --engine replay``): no child trained it, its
    #: evaluations and seconds are the table's, judged as a real run's.
    replayed: str | None = None
    #: The source trials a confirmation trial repeats: ``STUDY#N, STUDY#M`` (``sweeps confirm``).
    confirms: str | None = None

    #: Stored attributes this version does not know, or whose value is not of the field's type:
    #: kept as they were, written back as they were.
    extra: dict[str, Any] = field(default_factory=dict)

    # --- reading and writing --------------------------------------------------------------------

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> TrialRecord:
        """A record of stored user attributes (never raises: see the module's docstring)."""
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in attrs.items():
            if key in KINDS and value is not None and fits(value, KINDS[key]):
                known[key] = value
            elif key in KINDS and value is None:
                continue
            else:
                extra[key] = value
        return cls(**known, extra=extra)

    @classmethod
    def from_trial(cls, trial: FrozenTrial) -> TrialRecord:
        return cls.from_attrs(trial.user_attrs)

    def to_attrs(self) -> dict[str, Any]:
        """The user attributes to store, checked: ``extra`` as it was read, then each field that
        is set (a field set since wins over what ``extra`` kept under its name)."""
        self.check()
        out = dict(self.extra)
        for name in KINDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def check(self) -> None:
        """Raise TypeError naming the first field whose value is not of its type."""
        for name, kind in KINDS.items():
            value = getattr(self, name)
            if value is not None and not fits(value, kind):
                raise TypeError(
                    f"TrialRecord.{name} = {value!r} is not {kind.__name__}: set it as one"
                )

    def update(self, **values: Any) -> TrialRecord:
        """Set fields by name (an unknown name is a TypeError); returns the record."""
        for name, value in values.items():
            if name not in KINDS:
                raise TypeError(f"TrialRecord has no field {name!r}")
            setattr(self, name, value)
        return self

    def merge(self, other: TrialRecord) -> TrialRecord:
        """Take every field ``other`` sets (and its ``extra``); returns the record."""
        for name in KINDS:
            value = getattr(other, name)
            if value is not None:
                setattr(self, name, value)
        self.extra.update(other.extra)
        return self

    def without(self, names: tuple[str, ...]) -> TrialRecord:
        """A copy with the fields ``names`` unset (and dropped from ``extra``)."""
        out = dataclasses.replace(self, extra={k: v for k, v in self.extra.items()})
        for name in names:
            if name in KINDS:
                setattr(out, name, None)
            out.extra.pop(name, None)
        return out

    def get(self, name: str) -> Any:
        """The stored value of ``name``, typed or not (the analysis wing's column lists, which
        coerce what they show): the field, else what ``extra`` keeps under that key."""
        value = getattr(self, name) if name in KINDS else None
        return self.extra.get(name) if value is None else value


def _kind(hint: Any) -> type:
    """The stored type of a field ``X | None``: the type its JSON value reads back as."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = typing.get_origin(args[0]) or args[0]
    assert len(args) == 1 and isinstance(base, type), hint
    return base


_HINTS = typing.get_type_hints(TrialRecord)
#: Each field's name (the user attribute's key) and the type its value has.
KINDS: dict[str, type] = {
    f.name: _kind(_HINTS[f.name]) for f in dataclasses.fields(TrialRecord) if f.name != "extra"
}


def fits(value: Any, kind: type) -> bool:
    """Whether a stored ``value`` is a ``kind``: a float field takes any JSON number, an int
    field an integer; a bool is neither (JSON tells them apart)."""
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float))
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, kind)


def names(*keys: str) -> tuple[str, ...]:
    """``keys``, each checked to be a field (a misspelt name fails at import)."""
    unknown = [k for k in keys if k not in KINDS]
    if unknown:
        raise AssertionError(f"not fields of TrialRecord: {unknown}")
    return keys


def value_of(trial: FrozenTrial, key: str) -> Any:
    """One field of ``trial``'s record, typed as ``from_trial`` reads it (None when unset or of
    another type), without reading the rest: for loops over every trial of a study."""
    value = trial.user_attrs.get(key)
    return value if value is not None and fits(value, KINDS[key]) else None


def outcome_of(trial: FrozenTrial) -> str | None:
    """The stored outcome's name of ``trial`` (None before it ends)."""
    value = value_of(trial, OUTCOME)
    return value if isinstance(value, str) else None


# --- key names, for what must name a key (SQL reads, copies) -------------------------------------

OUTCOME = names("outcome")[0]
CARRIED_FROM = names("carried_from")[0]
CONFIRMS = names("confirms")[0]
SLURM_JOB = names("slurm_job")[0]
#: The values of a trial at each rung it passed: ``{"<tokens>": [value per objective]}``.
RUNGS = names("rungs")[0]
#: The training tokens at which it reached each of those rungs (``{"<rung>": tokens}``).
RUNG_TOKENS = names("rung_tokens")[0]
#: The field of each objective's unigram baseline, in its own unit: what a model that learned
#: only the corpus frequencies scores (it depends on the trial's tokenizer and vocabulary).
UNIGRAM_BASELINE = dict(
    zip(("val_bpb", "val_loss"), names("unigram_bpb", "unigram_entropy"), strict=True)
)

#: Final-evaluation keys the runner copies into the record from the child's last evaluation.
FINAL_METRICS = names(
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
    "unk_argmax_rate",
    "unk_rate_samples",
    "unk_byte_rate",
)
#: What ``result.json`` gives the record as it is.
RESULT_FIELDS = names(
    "bytes_per_token",
    "train_bytes",
    "unk_rate",
    "best_val_bpb",
    "steps",
    "device",
    "resumed_from_tokens",
)
#: The fields a trial cannot be read without: what the runner still writes when the database
#: refuses the whole record (the others are notes and details).
ESSENTIAL = names(
    "outcome", "reason", "constraint", "run_dir", "config", "host", "pid", "started_at"
)
#: Fields that describe a trial's own run, not its result: not copied to a repeated point's
#: trial (``runner.duplicate_of``), nor its ending.
OWN_RUN = names(
    "host",
    "pid",
    "started_at",
    "admitted_at",
    "placed_on",
    "reserved_mem_bytes",
    "child_pid",
    "returncode",
    "wall_s",
    "train_s",
    "cold_start_s",
    "setup_s",
    "sampled",
    "storage_problems",
    "child_file_problems",
    "threads",
    "threads_reason",
    "outcome",
    "reason",
    "constraint",
)
#: What a retry keeps of the trial it repeats: what the trial is, not what its run did.
REQUEUE_KEEPS = names("confirms")
#: Fields of the old run that do not describe a carried trial (``sweeps run --from``).
NOT_CARRIED = names("retries", "retry_of")

#: Numeric fields given their own column in the results (contract: "Trial record"), in order.
METRIC_COLUMNS = names(
    "val_bpb",
    "best_val_bpb",
    "val_loss",
    "accuracy",
    "peak_mem_bytes",
    "predicted_mem_bytes",
    "predicted_mem_raw_bytes",
    "memory_budget_bytes",
    "calibration_factor",
    "tokens_seen",
    "tokens_per_s",
    "wall_s",
    "train_s",
    "cold_start_s",
    "params_total",
    "bytes_per_token",
    "unk_rate",
    "unk_rate_targets",
    "unigram_entropy",
    "unigram_bpb",
    "unigram_gap",
    "kl_mean_to_unigram",
    "mean_kl_to_mean",
    "top20_overlap",
    "unk_argmax_rate",
    "unk_rate_samples",
    "unk_byte_rate",
    "steps",
    "planned_steps",
    "last_eval_step",
    "constraint",
    "train_bytes",
    "flops",
    "flops_per_token",
    "eval_flops",
    "predicted_flops",
    "flops_budget",
    "params_non_embedding",
    "params_embedding",
    "mfu",
)
#: The integer ones among them (a nullable integer column).
INT_METRICS = tuple(k for k in METRIC_COLUMNS if KINDS[k] is int)
#: Where and when a trial ran (``runner.run_trial``): the timeline's input.
WHERE_AND_WHEN = names("pid", "placed_on", "started_at", "admitted_at")
#: The notes given a column in the results, as they are: why a result may mislead.
NOTE_COLUMNS = names("under_trained", "unk_note")
#: Where a trial's result came from, given a column as it is (text, or a number that is an id).
HISTORY_COLUMNS = names(
    "retries", "retry_of", "carried_from", "copy_of", "budget_unit", "host", "slurm_job"
)

# --- the study's own attributes (``study.set_user_attr``) ----------------------------------------

#: The study's spec as JSON (``StudySpec.to_dict``), written by the first worker.
STUDY_SPEC = "spec"
#: The trials the study runs (``sweeps run --n-trials``, else the spec's).
STUDY_N_TRIALS = "n_trials"
#: Set once the spec's fixed trials (baseline, grid) are enqueued.
STUDY_ENQUEUED = "sweeps_enqueued"
#: The memory budget in bytes the workers plan against.
STUDY_MEMORY_BUDGET = "memory_budget_bytes"
#: The calibration factor of the memory predictions (``preflight.calibration_factor``).
STUDY_CALIBRATION = "calibration_factor"
#: A confirmation study's source trials (``sweeps confirm``).
STUDY_CONFIRMS = "confirms"
#: The trials carried into the study (``sweeps run --from``): {"study": ..., "trials": ...}.
STUDY_CARRIED = "sweeps_carried_from"
#: A verification study's prediction (``sweeps predict --verify``), written before its trial runs.
STUDY_PREDICTION = "prediction"
