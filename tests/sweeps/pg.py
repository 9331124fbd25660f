"""A fresh PostgreSQL database per test module, on the server CI and the dev machines run.

The server comes from ``$SWEEPS_TEST_POSTGRES`` (an admin URL), by default the local one at
127.0.0.1:5432; where it is unreachable (a laptop) the test is skipped with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from sweeps.storage import mask_url

PG_ADMIN = os.environ.get("SWEEPS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def create_database(prefix: str) -> tuple[sa.URL, Callable[[], None]]:
    """Create a uniquely named database on the ``PG_ADMIN`` server: its URL and a function that
    drops it (and its connections). psycopg's OperationalError when the server is unreachable."""
    import psycopg

    admin = sa.engine.make_url(PG_ADMIN)
    conninfo = dict(
        host=admin.host,
        port=admin.port or 5432,
        user=admin.username,
        dbname=admin.database,
        connect_timeout=3,
    )
    if admin.password:
        conninfo["password"] = admin.password
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(**conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return admin.set(database=name, drivername="postgresql"), drop


def bench_storages(sqlite_url: str) -> list[tuple[str, str, Callable[[], None] | None]]:
    """For the benchmarks: (label, URL, drop) of the SQLite file at ``sqlite_url`` and of a fresh
    database on the local PostgreSQL server (its password shown; ``drop`` removes it), the
    latter left out, and said so, where the server or psycopg is not there."""
    storages: list[tuple[str, str, Callable[[], None] | None]] = [("sqlite", sqlite_url, None)]
    try:
        import psycopg
    except ImportError:
        print("postgresql: skipped (psycopg is not installed)")
        return storages
    try:
        url, drop = create_database("sweeps_bench")
    except psycopg.OperationalError:
        print(f"postgresql: skipped ({mask_url(PG_ADMIN)} is unreachable)")
        return storages
    return [*storages, ("postgresql", url.render_as_string(hide_password=False), drop)]


@contextmanager
def fresh_database(prefix: str = "sweeps_test") -> Iterator[sa.URL]:
    """Create a uniquely named database, yield its URL, drop it after; skip where unreachable."""
    psycopg = pytest.importorskip("psycopg")
    try:
        url, drop = create_database(prefix)
    except psycopg.OperationalError as exc:
        pytest.skip(
            f"PostgreSQL at {mask_url(PG_ADMIN)} is unreachable "
            f"({str(exc).splitlines()[0]}); set SWEEPS_TEST_POSTGRES to a server"
        )
    try:
        yield url
    finally:
        drop()
