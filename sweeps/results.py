"""A study as tidy pandas DataFrames: the only input of the report's charts and of ``export``.

- ``study_frame``: one row per trial (parameters as ``param_<name>``, outcome and reason, the
  metrics the runner recorded, the trained config's key fields, the trained model's real
  vocabulary size ``vocab_actual``, fitting, host, timing).
- ``evals_frame``: one row per evaluation (``sweeps_evals``: the ``metrics.jsonl`` lines).
- ``samples_frame``: one row per generated sample (``sweeps_samples``).
- ``load``: all three plus the study's directions, attributes and search space, in one go.
- ``load_many`` and ``combine``: several studies, each loaded as above, and their frames stacked
  with a ``study`` column first (trial numbers stay each study's own): the cross-study report.

Optuna's own reader (``get_all_trials``) builds a ``FrozenTrial`` per trial through the ORM: ~6 s
for 2,000 trials with ~40 user attributes each. The tables are read here directly instead (one
query per table, through Optuna's own table definitions, so the schema is the installed
Optuna's): ~0.7 s for the same study, evaluations and samples included. Reading a URL writes
nothing: the database is opened read-only (``storage.read_only_engine``).
"""

from __future__ import annotations

import contextlib
import json
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import sqlalchemy as sa
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from lm import outcomes
from lm.config import TrainConfig
from lm.errors import SweepsError, closest
from sweeps import optuna_compat as oc
from sweeps import record as rc
from sweeps import records
from sweeps import storage as st
from sweeps.spec import objective_names

#: Numeric fields of the trial record given their own column (contract: "Trial record").
METRIC_COLUMNS = rc.METRIC_COLUMNS
#: Fields of the trained config (``config`` attribute, after fitting) given their own column.
CONFIG_COLUMNS = (
    "tokenizer",
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "d_ff",
    "parametrization",
    "base_width",
    "seq_len",
    "batch_size",
    "grad_accum",
    "attention",
    "precision",
    "checkpointing",
    "lr",
    "max_tokens",
    "max_bytes",
    "max_flops",
    "seed",
    "device",
)


def _int_fields(cls: type, names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``names`` that ``cls``'s type hints say are integers (``int`` or ``int | None``)."""
    hints = typing.get_type_hints(cls)
    return tuple(n for n in names if int in (typing.get_args(hints[n]) or (hints[n],)))


#: The integer ones (``lm.config.TrainConfig``'s hints): a nullable integer column.
_INT_CONFIG = _int_fields(TrainConfig, CONFIG_COLUMNS)
#: Evaluation keys with their own column in ``evals_frame`` (the rest of the JSON follows).
EVAL_COLUMNS = (
    "trial_number",
    "step",
    "tokens",
    "val_bpb",
    "val_loss",
    "train_loss",
    "unigram_gap",
    "peak_mem_bytes",
    "tokens_per_s",
    "elapsed_s",
)

StorageLike = str | RDBStorage | sa.Engine


@dataclass
class StudyResults:
    """Everything a report needs, read once."""

    name: str
    storage: str  # the URL, credentials masked
    directions: list[str]
    objectives: list[str]  # metric names (from the spec), else "objective 0", ...
    user_attrs: dict[str, Any]
    trials: pd.DataFrame
    evals: pd.DataFrame
    samples: pd.DataFrame
    #: The search space: each parameter's Optuna distribution (as last recorded).
    distributions: dict[str, BaseDistribution] = field(default_factory=dict)
    #: The field the charts colour by (``sweeps.charts.colors``), chosen by the report.
    color_by: str | None = None


# --- opening ----------------------------------------------------------------------------------


@contextlib.contextmanager
def reader(storage: StorageLike) -> Iterator[tuple[sa.Connection, str]]:
    """(connection, masked URL) for reading; ``SweepsError`` when the URL is bad or in memory, the
    database unreachable, a SQLite file missing, or the database not a sweeps one. A URL is opened
    read-only (``storage.read_only_engine``: nothing created or changed, a read-only mount is
    fine) and its engine disposed on exit."""
    owned = None
    if isinstance(storage, RDBStorage):
        engine = storage.engine
    elif isinstance(storage, sa.Engine):
        engine = storage
    else:
        engine = owned = st.read_only_engine(storage)
    shown = st.mask_url(
        storage if isinstance(storage, str) else engine.url.render_as_string(hide_password=False)
    )
    try:
        with engine.connect() as conn:
            st.require_sweeps_database(conn, shown)
            if owned is not None:  # a database Optuna wrote alone: no evaluations
                records.stand_in_tables(conn)
            yield conn, shown
    finally:
        if owned is not None:
            owned.dispose()


def _study_id(conn: sa.Connection, name: str, shown: str) -> int:
    table = oc.STUDIES_TABLE
    found = conn.execute(sa.select(table.c.study_id).where(table.c.study_name == name)).first()
    if found is None:
        names = list(conn.execute(sa.select(table.c.study_name)).scalars())
        listed = ", ".join(sorted(names)[:10]) or "none"
        hint = closest(name, names)
        raise SweepsError(
            f"study {name!r} is not in storage {shown}"
            + (f" (did you mean {hint!r}?)" if hint else "")
            + f" (studies there: {listed}); "
            "check the name or --storage"
        )
    return int(found[0])


# --- public readers -----------------------------------------------------------------------------


def study_frame(storage: StorageLike, study_name: str) -> pd.DataFrame:
    """One row per trial (see the module docstring); sorted by trial number."""
    with reader(storage) as (conn, shown):
        return _trials_frame(conn, _study_id(conn, study_name, shown))[0]


def evals_frame(storage: StorageLike, study_name: str) -> pd.DataFrame:
    """One row per evaluation: ``EVAL_COLUMNS`` then every other metric of the JSON (samples
    excluded; ``top_tokens`` kept as a dict)."""
    with reader(storage) as (conn, shown):
        _study_id(conn, study_name, shown)
        return _evals(conn, study_name)


def samples_frame(storage: StorageLike, study_name: str) -> pd.DataFrame:
    """One row per generated sample: trial_number, step, tokens, prompt, text."""
    with reader(storage) as (conn, shown):
        _study_id(conn, study_name, shown)
        return _samples(conn, study_name)


def trial_counts(storage: StorageLike, study_name: str) -> dict[TrialState, int]:
    """How many of the study's trials are in each Optuna state: one ``count`` query (what the
    live view polls, ``sweeps.serve``, to know when to draw the report again)."""
    t = oc.TRIALS_TABLE
    with reader(storage) as (conn, shown):
        study_id = _study_id(conn, study_name, shown)
        rows = conn.execute(
            sa.select(t.c.state, sa.func.count())
            .where(t.c.study_id == study_id)
            .group_by(t.c.state)
        ).all()
    return {TrialState[s] if isinstance(s, str) else TrialState(s): int(n) for s, n in rows}


def load(storage: StorageLike, study_name: str) -> StudyResults:
    """The study's trials, evaluations, samples, directions and attributes."""
    with reader(storage) as (conn, shown):
        study_id = _study_id(conn, study_name, shown)
        directions = _directions(conn, study_id)
        attrs = _attrs(conn, oc.STUDY_USER_ATTRS_TABLE, "study_id", study_id)
        trials, distributions = _trials_frame(conn, study_id)
        evals = _evals(conn, study_name)
        samples = _samples(conn, study_name)
    return StudyResults(
        name=study_name,
        storage=shown,
        directions=directions,
        objectives=objective_names(attrs.get(rc.STUDY_SPEC), len(directions)),
        user_attrs=attrs,
        trials=trials,
        evals=evals,
        samples=samples,
        distributions=distributions,
    )


def load_many(storage: StorageLike, names: list[str]) -> list[StudyResults]:
    """Each named study, loaded as ``load`` does (a name given twice is a ``SweepsError``)."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SweepsError(f"study {repeated[0]!r} is named twice; name each study once")
    return [load(storage, name) for name in names]


def combine(studies: list[StudyResults]) -> StudyResults:
    """Several studies as one: trials, evaluations and samples stacked with a ``study`` column
    first; directions and objectives where every study has the same, else empty."""

    def stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
        parts = [f.assign(study=s.name) for f, s in zip(frames, studies, strict=True)]
        frame = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
        return frame[["study", *(c for c in frame.columns if c != "study")]]

    same = all(
        s.directions == studies[0].directions and s.objectives == studies[0].objectives
        for s in studies
    )
    distributions: dict[str, BaseDistribution] = {}
    for s in studies:
        distributions.update(s.distributions)
    return StudyResults(
        name=" vs ".join(s.name for s in studies),
        storage=studies[0].storage,
        directions=studies[0].directions if same else [],
        objectives=studies[0].objectives if same else [],
        user_attrs={},
        trials=stacked([s.trials for s in studies]),
        evals=stacked([s.evals for s in studies]),
        samples=stacked([s.samples for s in studies]),
        distributions=distributions,
    )


# --- Optuna's tables ----------------------------------------------------------------------------


def _directions(conn: sa.Connection, study_id: int) -> list[str]:
    t = oc.STUDY_DIRECTIONS_TABLE
    rows = conn.execute(
        sa.select(t.c.direction).where(t.c.study_id == study_id).order_by(t.c.objective)
    ).scalars()
    return [d.name.lower() for d in rows]


def _attrs(conn: sa.Connection, table: sa.Table, key_column: str, key: int) -> dict[str, Any]:
    rows = conn.execute(
        sa.select(table.c.key, table.c.value_json).where(table.c[key_column] == key)
    )
    return {k: json.loads(v) for k, v in rows}


def _by_trial(table: sa.Table, study_id: int, *columns: str) -> sa.Select[Any]:
    """(trial_id, *columns) of the rows of ``table`` that belong to the study's trials."""
    trials = oc.TRIALS_TABLE
    return (
        sa.select(table.c.trial_id, *(table.c[c] for c in columns))
        .join(trials, trials.c.trial_id == table.c.trial_id)
        .where(trials.c.study_id == study_id)
    )


def _trials_frame(
    conn: sa.Connection, study_id: int
) -> tuple[pd.DataFrame, dict[str, BaseDistribution]]:
    t = oc.TRIALS_TABLE
    base = conn.execute(
        sa.select(t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start, t.c.datetime_complete)
        .where(t.c.study_id == study_id)
        .order_by(t.c.number)
    ).all()
    params: dict[int, dict[str, Any]] = {}
    dists: dict[str, BaseDistribution] = {}
    by_name: dict[str, BaseDistribution] = {}
    p = oc.TRIAL_PARAMS_TABLE
    # By param_id: columns in the order the parameters were first suggested, on any database.
    for trial_id, name, value, dist_json in conn.execute(
        _by_trial(p, study_id, "param_name", "param_value", "distribution_json").order_by(
            p.c.param_id
        )
    ):
        dist = dists.get(dist_json) or dists.setdefault(dist_json, json_to_distribution(dist_json))
        params.setdefault(trial_id, {})[name] = dist.to_external_repr(value)
        by_name[name] = dist
    attrs: dict[int, dict[str, Any]] = {}
    u = oc.TRIAL_USER_ATTRS_TABLE
    for trial_id, key, value in conn.execute(_by_trial(u, study_id, "key", "value_json")):
        attrs.setdefault(trial_id, {})[key] = json.loads(value)
    # A queued trial's parameters (enqueue_trial, a re-queued failure) are only a system
    # attribute until the trial runs and suggests them.
    sys_attrs = oc.TRIAL_SYSTEM_ATTRS_TABLE
    for trial_id, value in conn.execute(
        _by_trial(sys_attrs, study_id, "value_json").where(sys_attrs.c.key == "fixed_params")
    ):
        queued = json.loads(value)
        if isinstance(queued, dict):
            for name, v in queued.items():
                params.setdefault(trial_id, {}).setdefault(name, v)
    rows = [
        _trial_row(
            number, state, start, end, params.get(trial_id, {}), attrs.get(trial_id, {}), by_name
        )
        for trial_id, number, state, start, end in base
    ]
    return _typed(pd.DataFrame(rows, columns=_columns(by_name))), by_name


def _columns(param_names: Mapping[str, Any]) -> list[str]:
    return [
        "number",
        "state",
        "outcome",
        "reason",
        *rc.NOTE_COLUMNS,
        *(f"param_{n}" for n in param_names),
        *METRIC_COLUMNS,
        *CONFIG_COLUMNS,
        "vocab_actual",
        "fitted",
        "fitted_batch_size",
        "fitted_grad_accum",
        *rc.HISTORY_COLUMNS,
        *rc.WHERE_AND_WHEN,
        "run_dir",
        "datetime_start",
        "datetime_complete",
        "duration_s",
        "config_json",
    ]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _trial_row(
    number: int,
    state: TrialState,
    start: Any,
    end: Any,
    params: dict[str, Any],
    attrs: dict[str, Any],
    names: Mapping[str, Any],
) -> dict[str, Any]:
    rec = rc.TrialRecord.from_attrs(attrs)
    row: dict[str, Any] = {
        "number": number,
        "state": state.name,
        "outcome": outcomes.shown(rec.outcome, state.name),
        "reason": rec.reason,
    }
    for name in names:
        row[f"param_{name}"] = params.get(name)
    for key in METRIC_COLUMNS:
        row[key] = _number(rec.get(key))
    if row["params_total"] is None and rec.params is not None:
        row["params_total"] = _number(rec.params.get("total"))
    config = rec.config or {}
    sampled = rec.sampled or {}
    for key in CONFIG_COLUMNS:
        value = config.get(key, params.get(key, sampled.get(key)))
        row[key] = value if not isinstance(value, (dict, list)) else json.dumps(value)
    row["vocab_actual"] = vocab_actual(rec.params, config)
    row["fitted"] = rec.fitted is not None
    row["fitted_batch_size"] = (rec.fitted or {}).get("batch_size")
    row["fitted_grad_accum"] = (rec.fitted or {}).get("grad_accum")
    # Notes, ids and where it ran, as recorded: ``carried_from`` is "STUDY#N" (``run --from``),
    # ``copy_of`` a repeated point's source (``runner.duplicate_of``), ``slurm_job`` the
    # Slurm engine's ARRAYJOB_TASK.
    for key in (*rc.NOTE_COLUMNS, *rc.HISTORY_COLUMNS, *rc.WHERE_AND_WHEN):
        row[key] = _number(rec.get(key)) if rc.KINDS[key] is float else rec.get(key)
    row["retries"] = 0 if row["retries"] is None else row["retries"]
    row["run_dir"] = rec.run_dir
    row["datetime_start"] = start
    row["datetime_complete"] = end
    duration = None
    if start is not None and end is not None:
        duration = (end - start).total_seconds()
    row["duration_s"] = row["wall_s"] if row["wall_s"] is not None else duration
    row["config_json"] = json.dumps(config, sort_keys=True) if config else None
    return row


def vocab_actual(params: Any, config: Mapping[str, Any]) -> int | None:
    """The vocabulary size of the model the trial trained, which can be below the requested
    ``vocab_size`` (a word tokenizer on a small corpus has fewer words than asked): the child
    records its model's parameters (``result.json``'s ``params``, ``lm.config.param_breakdown``),
    whose token embedding is V x ``d_model``. None when the trial recorded no parameters."""
    embedding = params.get("embedding") if isinstance(params, dict) else None
    d_model = config.get("d_model")
    if (
        not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (embedding, d_model)
        )
        or embedding % d_model  # type: ignore[operator]  # both ints: checked just above
    ):
        return None
    return embedding // d_model  # type: ignore[operator, no-any-return]  # as above


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Integers as nullable ``Int64`` (4096, not 4096.0, in exports); other metrics float."""
    frame["number"] = frame["number"].astype("int64")
    for key in METRIC_COLUMNS:
        frame[key] = pd.to_numeric(frame[key], errors="coerce").astype("float64")
    ints = [
        *rc.INT_METRICS,
        *_INT_CONFIG,
        "vocab_actual",
        "fitted_batch_size",
        "fitted_grad_accum",
        *(k for k in (*rc.HISTORY_COLUMNS, *rc.WHERE_AND_WHEN) if rc.KINDS[k] is int),
    ]
    for key in ints:
        values = pd.to_numeric(frame[key], errors="coerce")
        if values.dropna().eq(values.dropna().round()).all():
            frame[key] = values.round().astype("Int64")
    frame["lr"] = pd.to_numeric(frame["lr"], errors="coerce").astype("float64")
    for key in ("duration_s", *(k for k in rc.WHERE_AND_WHEN if rc.KINDS[k] is float)):
        frame[key] = pd.to_numeric(frame[key], errors="coerce").astype("float64")
    frame["fitted"] = frame["fitted"].astype(bool)
    return frame


# --- the project's tables -----------------------------------------------------------------------


def _evals(conn: sa.Connection, study: str) -> pd.DataFrame:
    t = records.evals_table
    rows = conn.execute(
        sa.select(t.c.trial_number, t.c.metrics)
        .where(t.c.study_name == study)
        .order_by(t.c.trial_number, t.c.id)
    )
    lines = []
    for number, text in rows:
        metrics = json.loads(text)
        metrics.pop("samples", None)
        metrics["trial_number"] = number
        lines.append(metrics)
    frame = pd.DataFrame.from_records(lines)
    for key in EVAL_COLUMNS:
        if key not in frame:
            frame[key] = pd.Series(dtype="float64")
    rest = [c for c in frame.columns if c not in EVAL_COLUMNS]
    frame = frame[[*EVAL_COLUMNS, *rest]]
    for key in EVAL_COLUMNS:
        frame[key] = pd.to_numeric(frame[key], errors="coerce")
    frame["trial_number"] = frame["trial_number"].astype("int64")
    return frame.reset_index(drop=True)


def _samples(conn: sa.Connection, study: str) -> pd.DataFrame:
    t = records.samples_table
    columns = ["trial_number", "step", "tokens", "prompt", "text"]
    rows = conn.execute(
        sa.select(*(t.c[c] for c in columns))
        .where(t.c.study_name == study)
        .order_by(t.c.trial_number, t.c.id)
    ).all()
    frame = pd.DataFrame([tuple(r) for r in rows], columns=columns)
    frame["trial_number"] = frame["trial_number"].astype("int64")
    return frame
