"""Batched SQL for copying a study's rows (Optuna's tables in ``sweeps.optuna_compat``, the
project's in ``sweeps.records``): how many rows a statement carries, and one ``executemany``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

#: Rows per ``executemany`` (and trials per read) of a copy: a 3,000-trial study is some hundreds
#: of statements, not one (or several) per trial and attribute as through Optuna's API.
COPY_BATCH = 500


def insert_rows(conn: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (a batch: at most ``COPY_BATCH``, every row with the same keys) in one
    ``executemany``."""
    if rows:
        conn.execute(table.insert(), list(rows))


def batches(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``COPY_BATCH`` (read when called: a test may change it)."""
    for start in range(0, len(items), COPY_BATCH):
        yield items[start : start + COPY_BATCH]
