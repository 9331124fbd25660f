"""The project's own tables (``sweeps_*``), beside Optuna's in the same database.

- ``sweeps_evals``: one row per evaluation of a trial (a ``metrics.jsonl`` line: the columns
  in ``EVAL_COLUMNS`` and the whole line as JSON).
- ``sweeps_samples``: text a model generated at an evaluation.
- ``sweeps_trial_hosts``: which process runs a trial (host, pid, start), read by
  ``sweeps.liveness`` to fail the trials of a dead worker at once.

SQLAlchemy Core, created where missing (``ensure_tables``, safe against a racing worker).
Text from a model, a corpus or a child goes in through ``sweeps.text.storable`` (NUL and lone
surrogates become U+FFFD), so what SQLite stores PostgreSQL stores too. Opening the database
is ``sweeps.storage``'s; a study's rows follow it through ``sweeps.lifecycle`` (copy, rename,
delete).
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage

from sweeps import sql
from sweeps.text import storable, storable_value

EngineLike = sa.Engine | RDBStorage

metadata = sa.MetaData()

evals_table = sa.Table(
    "sweeps_evals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_name", sa.String(512), nullable=False),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("trial_id", sa.Integer, nullable=False),
    sa.Column("step", sa.BigInteger),
    sa.Column("tokens", sa.BigInteger),
    sa.Column("val_loss", sa.Float),
    sa.Column("val_bpb", sa.Float),
    sa.Column("unigram_gap", sa.Float),
    sa.Column("peak_mem_bytes", sa.BigInteger),
    sa.Column("tokens_per_s", sa.Float),
    sa.Column("elapsed_s", sa.Float),
    # The whole evaluation as JSON text: every metric, including ones without a column.
    sa.Column("metrics", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.Float, nullable=False),
    sa.Index("ix_sweeps_evals_study_trial", "study_name", "trial_number"),
)

samples_table = sa.Table(
    "sweeps_samples",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_name", sa.String(512), nullable=False),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("trial_id", sa.Integer),
    sa.Column("step", sa.BigInteger),
    sa.Column("tokens", sa.BigInteger),
    sa.Column("prompt", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.Float, nullable=False),
    sa.Index("ix_sweeps_samples_study_trial", "study_name", "trial_number"),
)

hosts_table = sa.Table(
    "sweeps_trial_hosts",
    metadata,
    sa.Column("trial_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("study_name", sa.String(512), nullable=False),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),  # unix seconds
    sa.Index("ix_sweeps_trial_hosts_study", "study_name"),
)

#: Evaluation keys copied into their own columns (the rest stay in the JSON only).
EVAL_COLUMNS = (
    "step",
    "tokens",
    "val_loss",
    "val_bpb",
    "unigram_gap",
    "peak_mem_bytes",
    "tokens_per_s",
    "elapsed_s",
)
_INT_COLUMNS = ("step", "tokens", "peak_mem_bytes")


def ensure_tables(engine: EngineLike) -> None:
    """Create the ``sweeps_*`` tables where missing (idempotent; safe against a racing worker)."""
    engine = _engine(engine)
    for attempt in range(4):
        try:
            metadata.create_all(engine, checkfirst=True)
            return
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
            if attempt == 3 or not is_create_race(exc):
                raise
            time.sleep(0.1 * (attempt + 1))


def stand_in_tables(conn: sa.Connection) -> None:
    """The project's tables a database lacks (one written by Optuna alone), as empty temporary
    tables of this connection: readers query them as usual and the database stays unchanged."""
    present = set(sa.inspect(conn).get_table_names())
    for table in metadata.sorted_tables:
        if table.name not in present:
            temp = sa.Table(
                table.name,
                sa.MetaData(),
                *(sa.Column(c.name, c.type) for c in table.columns),
                prefixes=["TEMPORARY"],
            )
            temp.create(conn)


def is_create_race(exc: Exception) -> bool:
    """Whether a database error is another process creating the same table or row first."""
    text = str(getattr(exc, "orig", exc)).lower()
    return "already exists" in text or "duplicate" in text or "unique constraint" in text


def record_eval(
    engine: EngineLike, study: str, trial_number: int, trial_id: int, metrics: Mapping[str, Any]
) -> None:
    """Store one evaluation (a ``metrics.jsonl`` line) of one trial."""
    row: dict[str, Any] = {
        "study_name": study,
        "trial_number": trial_number,
        "trial_id": trial_id,
        # Extras are a child's free-form values: their strings follow the one storage rule.
        "metrics": json.dumps(
            storable_value(dict(metrics)), sort_keys=True, default=lambda v: storable(str(v))
        ),
        "recorded_at": time.time(),
    }
    for key in EVAL_COLUMNS:
        row[key] = _column_value(metrics.get(key), integer=key in _INT_COLUMNS)
    with _engine(engine).begin() as conn:
        conn.execute(evals_table.insert(), [row])


def record_samples(
    engine: EngineLike,
    study: str,
    trial_number: int,
    trial_id: int | None,
    samples: Mapping[str, str] | Iterable[Mapping[str, str]],
    *,
    tokens: int | None = None,
    step: int | None = None,
) -> None:
    """Store generated samples: ``{prompt: text}`` or ``[{"prompt": ..., "text": ...}]``."""
    items = (
        [{"prompt": p, "text": t} for p, t in samples.items()]
        if isinstance(samples, Mapping)
        else [dict(s) for s in samples]
    )
    if not items:
        return
    now = time.time()
    rows = [
        {
            "study_name": study,
            "trial_number": trial_number,
            "trial_id": trial_id,
            "step": _column_value(step, integer=True),
            "tokens": _column_value(tokens, integer=True),
            "prompt": storable(str(s["prompt"])),
            "text": storable(str(s["text"])),
            "recorded_at": now,
        }
        for s in items
    ]
    with _engine(engine).begin() as conn:
        conn.execute(samples_table.insert(), rows)


def record_host(
    engine: EngineLike,
    study: str,
    trial_number: int,
    trial_id: int,
    *,
    host: str | None = None,
    pid: int | None = None,
    started_at: float | None = None,
) -> None:
    """Record which process owns a trial (default: this host, this process, now): the process
    that talks to Optuna for it, i.e. the worker, not the training child."""
    row = {
        "trial_id": trial_id,
        "study_name": study,
        "trial_number": trial_number,
        "host": host or socket.gethostname(),
        "pid": os.getpid() if pid is None else pid,
        "started_at": time.time() if started_at is None else started_at,
    }
    with _engine(engine).begin() as conn:
        # Delete + insert instead of a dialect-specific upsert: one row per trial id.
        conn.execute(hosts_table.delete().where(hosts_table.c.trial_id == trial_id))
        conn.execute(hosts_table.insert(), [row])


def read_evals(
    engine: EngineLike, study: str, trial_number: int | None = None
) -> list[dict[str, Any]]:
    """Evaluations of a study (or one trial) in recording order; ``metrics`` decoded."""
    t = evals_table
    query = sa.select(t).where(t.c.study_name == study)
    if trial_number is not None:
        query = query.where(t.c.trial_number == trial_number)
    rows = _rows(engine, query.order_by(t.c.trial_number, t.c.id))
    for row in rows:
        row["metrics"] = json.loads(row["metrics"])
    return rows


def read_samples(
    engine: EngineLike, study: str, trial_number: int | None = None
) -> list[dict[str, Any]]:
    """Generated samples of a study (or one trial) in recording order."""
    t = samples_table
    query = sa.select(t).where(t.c.study_name == study)
    if trial_number is not None:
        query = query.where(t.c.trial_number == trial_number)
    return _rows(engine, query.order_by(t.c.trial_number, t.c.id))


def read_hosts(
    engine: EngineLike,
    study: str | None = None,
    *,
    host: str | None = None,
    trial_ids: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """Host/pid rows of a study's trials (every study's when ``study`` is None), only those of
    ``host`` and of ``trial_ids`` when given."""
    t = hosts_table
    query = sa.select(t)
    if study is not None:
        query = query.where(t.c.study_name == study)
    if host is not None:
        query = query.where(t.c.host == host)
    if trial_ids is not None:
        query = query.where(t.c.trial_id.in_(list(trial_ids)))
    return _rows(engine, query.order_by(t.c.study_name, t.c.trial_number))


def delete_study_records(engine: EngineLike, study: str) -> None:
    """Remove a study's rows from the project's tables, in a transaction of their own."""
    with _engine(engine).begin() as conn:
        delete_study_rows(conn, study)


def delete_study_rows(conn: sa.Connection, study: str) -> None:
    """Remove a study's rows from the project's tables inside the caller's transaction
    (``sweeps.lifecycle`` deletes Optuna's rows in the same one)."""
    for table in (evals_table, samples_table, hosts_table):
        conn.execute(table.delete().where(table.c.study_name == study))


def copy_study_records(
    source: EngineLike,
    study: str,
    target: EngineLike,
    new_study: str,
    trial_ids: Mapping[int, tuple[int, int]],
) -> int:
    """``copy_study_rows`` in a transaction of its own on ``target``; rows copied."""
    with _engine(source).connect() as src, _engine(target).begin() as dst:
        return copy_study_rows(src, dst, study, new_study, trial_ids)


def copy_study_rows(
    source: sa.Connection,
    target: sa.Connection,
    study: str,
    new_study: str,
    trial_ids: Mapping[int, tuple[int, int]],
) -> int:
    """Copy the evaluations and samples of ``study``'s trials into ``new_study`` inside the
    callers' transactions (``target``: the same connection, or one on another database):
    ``trial_ids`` maps each copied trial's number to its (number, storage id) in the new study;
    other trials' rows stay behind. Read and written ``sql.COPY_BATCH`` rows at a time. Host rows
    are not copied: they name live worker processes of the source. Rows copied."""
    copied = 0
    for table in (evals_table, samples_table):
        # Rows already under the new name belong to no study (the new study did not exist:
        # an orphan of `optuna delete-study`); they must not join the copy.
        target.execute(table.delete().where(table.c.study_name == new_study))
        last = None
        while True:
            query = sa.select(table).where(table.c.study_name == study)
            if last is not None:
                query = query.where(table.c.id > last)
            rows = source.execute(query.order_by(table.c.id).limit(sql.COPY_BATCH)).mappings().all()
            if not rows:
                break
            last = rows[-1]["id"]
            # A database written before the storage rule may hold NUL (SQLite took it): the
            # copy follows the rule, so it lands on PostgreSQL too.
            values = [
                {
                    **{
                        k: storable(v) if isinstance(v, str) else v
                        for k, v in r.items()
                        if k != "id"
                    },
                    "study_name": new_study,
                    "trial_number": trial_ids[r["trial_number"]][0],
                    "trial_id": trial_ids[r["trial_number"]][1],
                }
                for r in rows
                if r["trial_number"] in trial_ids
            ]
            sql.insert_rows(target, table, values)
            copied += len(values)
    return copied


def rename_study_records(conn: sa.Connection, study: str, new_study: str) -> None:
    """Move ``study``'s rows of the project's tables to ``new_study``, inside the caller's
    transaction; rows left under ``new_study`` by a study deleted outside sweeps (an orphan of
    ``optuna delete-study``) are removed first, so they never join the renamed study."""
    for table in (evals_table, samples_table, hosts_table):
        conn.execute(table.delete().where(table.c.study_name == new_study))
        conn.execute(table.update().where(table.c.study_name == study).values(study_name=new_study))


def _rows(engine: EngineLike, query: sa.Select[Any]) -> list[dict[str, Any]]:
    with _engine(engine).connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def _engine(engine: EngineLike) -> sa.Engine:
    return engine.engine if isinstance(engine, RDBStorage) else engine


def _column_value(value: Any, *, integer: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if integer:
        # BIGINT holds what a count can be; a larger value (a child's garbage) stays in the
        # JSON only, where PostgreSQL would refuse the row ("bigint out of range").
        return int(value) if math.isfinite(value) and abs(value) < 2**63 else None
    # NaN is not portable as a column value (SQLite stores NULL); it stays in the JSON.
    return None if math.isnan(value) else float(value)
