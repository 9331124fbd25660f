"""A storage URL -> Optuna's RDB storage (or a plain engine): settings, opening, read-only, errors.

- URL: ``--storage``, else ``$SWEEPS_STORAGE``, else the spec's ``[study] storage``, else
  ``sqlite:///sweeps.db``. Passwords are masked (``***``) in every message (``mask_url``).
- SQLite: WAL journal (readers never block the writer) and a 60 s busy timeout on every
  connection, so several local workers queue for the write lock instead of failing with
  "database is locked". Optuna builds its engine and creates its tables inside
  ``RDBStorage.__init__``, before a caller could attach a connect event to that engine; a
  ``creator`` in ``engine_kwargs`` is the one hook that covers the very first connection too.
- PostgreSQL: ``postgresql://`` is rewritten to psycopg 3 (``postgresql+psycopg://``), with
  ``pool_pre_ping`` (a worker survives a server restart or an idle-connection cull).
- A URL that is invalid or unreachable is a one-line ``SweepsError`` raised *before* Optuna
  touches the database, so a typo creates nothing (for SQLite: a missing directory is an error,
  never created).
- Read-only commands (``status``, ``trials``, ``report``, ``export``) open the database with
  ``read_only_engine``/``read_only_storage``: no table created, no WAL switch, nothing written
  (SQLite ``mode=ro``, so a file on a read-only mount is readable), and a database without
  Optuna's tables is "not a sweeps database". An in-memory SQLite URL is refused: every process
  would see its own empty database.
- Every open ensures the project's tables (``sweeps.records``); a storage opened with a heartbeat
  re-queues the trials of dead workers (``sweeps.liveness.RequeueCallback``).
- ``describe_error``: a database error as one line (the driver's message, without the SQL and
  its parameters, which can be kilobytes of model text).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial

from lm.errors import SweepsError
from sweeps import optuna_compat
from sweeps.childenv import STORAGE_ENV_VAR
from sweeps.liveness import RequeueCallback
from sweeps.records import ensure_tables, is_create_race

DEFAULT_URL = "sqlite:///sweeps.db"
ENV_VAR = STORAGE_ENV_VAR
#: Seconds a SQLite connection waits for the write lock before "database is locked".
SQLITE_TIMEOUT_S = 60.0
#: Seconds to wait for a database server before calling it unreachable.
CONNECT_TIMEOUT_S = 10


# --- URLs ---------------------------------------------------------------------------------------


def resolve_storage_url(cli: str | None, spec_url: str | None) -> str:
    """The storage URL by precedence: ``--storage``, ``$SWEEPS_STORAGE``, the spec, default."""
    for candidate in (cli, os.environ.get(ENV_VAR), spec_url):
        if candidate is not None and candidate.strip():
            return candidate.strip()
    return DEFAULT_URL


def mask_url(url: str) -> str:
    """The URL with its password shown as ``***`` (in the user info and a ``password=`` query
    parameter), read the way SQLAlchemy reads it, so what is hidden is what would be sent:
    ``postgresql://user:a/b#c@host/db`` -> ``postgresql://user:***@host/db``. A URL SQLAlchemy
    cannot parse keeps only what follows its last ``@``: nothing there can be a password."""
    parsed = _parsed(url)
    if parsed is None:
        return _mask_unparsed(url)
    query_secret = any(k.lower() == "password" for k in parsed.query)
    if parsed.password is None and "@" not in (parsed.host or "") and not query_secret:
        return url  # nothing to hide: shown exactly as written
    if parsed.host and "@" in parsed.host:
        # SQLAlchemy ends the password at the first "@"; a literal "@" in a password leaves the
        # rest of it in the host. None of it is shown.
        parsed = parsed.set(host=parsed.host.rpartition("@")[2])
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    if parsed.query:
        pairs = [
            (k, v)
            for k, vs in parsed.query.items()
            for v in (vs if isinstance(vs, tuple) else (vs,))
        ]
        shown += "?" + "&".join(
            f"{quote_plus(k)}=" + ("***" if k.lower() == "password" else quote_plus(v))
            for k, v in pairs
        )
    return shown


#: ``password=...`` in a libpq key-value string (``host=h password=secret``, quoted or not),
#: which people paste where a URL goes: hidden, though it is not a URL at all.
_KEY_VALUE_PASSWORD = re.compile(r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)""", re.I)


def _mask_unparsed(url: str) -> str:
    if "://" not in url and _KEY_VALUE_PASSWORD.search(url):
        return _KEY_VALUE_PASSWORD.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://") if "://" in url else ("", "", url)
    _, at, host = rest.rpartition("@")
    if at:
        rest = f"***@{host}"
    path, q, query = rest.partition("?")
    if q:
        query = "&".join(
            (p.split("=", 1)[0] + "=***") if p.lower().startswith("password=") else p
            for p in query.split("&")
        )
    return f"{scheme}{sep}{path}{q}{query}"


def normalize_url(url: str) -> str:
    """Validate the URL's form; ``postgres(ql)://`` gets the psycopg 3 driver."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise SweepsError(
            f"storage URL {mask_url(url)!r} is not a database URL; use e.g. "
            f"{DEFAULT_URL} or postgresql://user@host/dbname"
        ) from None
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and (
        database in ("", ":memory:")
        or database.startswith("file::memory:")
        or "mode=memory" in database
        or parsed.query.get("mode") == "memory"
    ):
        # Each connection would get its own empty database: workers and trial processes could
        # never see the study.
        raise SweepsError(
            f"storage {mask_url(url)} is an in-memory SQLite database, which "
            "every process sees empty; use a file, e.g. sqlite:///sweeps.db"
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
        return parsed.render_as_string(hide_password=False)
    return url


# --- opening ------------------------------------------------------------------------------------


def open_storage(
    url: str,
    *,
    heartbeat_interval: int | None = None,
    grace_period: int | None = None,
    failed_trial_callback: Callable[[optuna.Study, FrozenTrial], None] | None = None,
    max_retries: int | None = 2,
) -> RDBStorage:
    """Optuna's storage at ``url`` with the project's tables ensured; ``SweepsError`` (masked
    URL, a hint) when the URL is invalid or the database cannot be reached, with nothing created.

    ``heartbeat_interval`` (s) turns heartbeats on; a RUNNING trial silent for ``grace_period``
    (s, default Optuna's 2 x interval) is failed and handed to ``failed_trial_callback``, by
    default ``RequeueCallback(max_retries)``.
    """
    shown, url = url, normalize_url(url)
    engine_kwargs = _engine_kwargs(url, shown)
    if heartbeat_interval is not None and failed_trial_callback is None:
        failed_trial_callback = RequeueCallback(max_retries)
    heartbeat: dict[str, Any] = {}
    if heartbeat_interval is not None:
        heartbeat = {"heartbeat_interval": heartbeat_interval, "grace_period": grace_period}
        if failed_trial_callback is not None:
            heartbeat[_CALLBACK_ARG] = failed_trial_callback
    new_file = _new_sqlite_file(url)
    try:
        return _open_rdb(url, shown, engine_kwargs, heartbeat)
    except SweepsError:
        if new_file is not None:  # "nothing created": a full disk left a stub, -wal and -shm
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{new_file}{suffix}")
        raise


def _new_sqlite_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist yet (this open would create it)."""
    parsed = sa.engine.make_url(url)
    database = parsed.database or ""
    if (
        parsed.get_backend_name() != "sqlite"
        or not database
        or database == ":memory:"
        or database.startswith("file:")
    ):
        return None
    path = Path(database).expanduser()
    return None if path.exists() else path


def _open_rdb(
    url: str, shown: str, engine_kwargs: dict[str, Any], heartbeat: dict[str, Any]
) -> RDBStorage:
    # Several workers starting at once on a new database race to create the same tables (and
    # Optuna's version row): the loser sees "already exists" and simply tries again.
    for attempt in range(4):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeat)
            ensure_tables(storage.engine)
            return storage
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
            if attempt < 3 and is_create_race(exc):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise _storage_error(shown, exc) from None
        except (sa.exc.SQLAlchemyError, sqlite3.Error, RuntimeError, ValueError) as exc:
            raise _storage_error(shown, exc) from None
    raise AssertionError("unreachable")


def open_engine(url: str) -> sa.Engine:
    """A plain SQLAlchemy engine on the storage (same checks and settings as ``open_storage``),
    for readers that need the project's tables but not Optuna."""
    shown, url = url, normalize_url(url)
    engine = sa.create_engine(url, **_engine_kwargs(url, shown))
    try:
        ensure_tables(engine)
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        engine.dispose()
        raise _storage_error(shown, exc) from None
    return engine


def _engine_kwargs(url: str, shown: str) -> dict[str, Any]:
    """Check the database is there (creating nothing) and return the engine settings; errors
    show ``shown`` (the URL as the user wrote it), masked."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_kwargs(shown, parsed)
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    probe = None
    try:
        probe = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args)
        with probe.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except ImportError as exc:
        raise SweepsError(
            f"storage {mask_url(shown)}: the database driver is not installed "
            f"({exc.name or exc}); for PostgreSQL install psycopg[binary] and use "
            "postgresql://"
        ) from None
    except (sa.exc.SQLAlchemyError, OSError) as exc:
        raise _storage_error(shown, exc) from None
    finally:
        if probe is not None:
            probe.dispose()
    return {"pool_pre_ping": True, "connect_args": connect_args}


def _sqlite_kwargs(url: str, parsed: sa.URL) -> dict[str, Any]:
    database = parsed.database or ""
    if database.startswith("file:") or parsed.query.get("uri") == "true":
        return {}  # the URI form: opened as written, nothing to check
    path = Path(database).expanduser()
    if path.is_dir():
        raise _is_a_directory(url, path)
    if not path.parent.is_dir():
        raise SweepsError(
            f"storage {mask_url(url)}: directory {path.parent} does not exist; "
            "create it first or point the URL at an existing directory"
        )

    def connect() -> sqlite3.Connection:
        # check_same_thread=False: Optuna's heartbeat thread and the pool share connections.
        conn = sqlite3.connect(str(path), timeout=SQLITE_TIMEOUT_S, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(SQLITE_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL is durable across a process crash (only an OS crash can lose the last
        # commits) and avoids an fsync per trial update.
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return {"creator": connect, "pool_pre_ping": True}


# --- transactions -------------------------------------------------------------------------------


@contextlib.contextmanager
def write_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One write transaction on ``engine``: committed when the block ends, rolled back on any
    exception (or by the database when the process is killed), so what it writes lands whole or
    not at all. On SQLite it is ``BEGIN IMMEDIATE``: the write lock is taken before the first
    read, so the checks read inside it still hold at the commit, and a second writer waits its
    busy timeout instead of failing half way (a deferred ``BEGIN`` that reads first cannot
    upgrade to a writer while another one writes). On PostgreSQL: the connection's transaction."""
    with _transaction(engine, "BEGIN IMMEDIATE") as conn:
        yield conn


@contextlib.contextmanager
def read_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One read transaction: every query inside it sees the same committed state (SQLite: a
    deferred ``BEGIN``, whose first read fixes the snapshot; PostgreSQL: ``REPEATABLE READ``),
    so a copy read from it is of one moment even while workers write."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn
        return
    with _transaction(engine, "BEGIN") as conn:
        yield conn


@contextlib.contextmanager
def _transaction(engine: sa.Engine, sqlite_begin: str) -> Iterator[sa.Connection]:
    with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            with conn.begin():
                yield conn
            return
        # Python's sqlite3 begins a transaction only before its first write, and SQLAlchemy's
        # begin() leaves that to it: the driver's own transaction handling is off while the
        # block runs, and the block's BEGIN is the one sent. Its commit() and rollback() end
        # whatever transaction the database has open.
        raw = conn.connection.dbapi_connection
        assert raw is not None
        saved = raw.isolation_level
        raw.isolation_level = None
        try:
            conn.exec_driver_sql(sqlite_begin)
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        finally:
            raw.isolation_level = saved


# --- reading without writing -------------------------------------------------------------------


def read_only_engine(url: str) -> sa.Engine:
    """A plain engine on an existing sweeps database that writes nothing to it: SQLite opened
    ``mode=ro`` (no WAL switch, no ``-wal``/``-shm`` left behind, readable on a read-only mount),
    no table created anywhere. ``SweepsError`` (one line, masked URL) when the URL is invalid or
    in memory, the file missing, the server unreachable, or the database not a sweeps one."""
    return _read_only(url)[0]


def read_only_storage(url: str) -> RDBStorage:
    """Optuna's storage on an existing sweeps database, with ``read_only_engine``'s guarantees
    (for ``status``, ``trials``, and a joining worker reading the study's spec)."""
    engine, normalized, kwargs, shown = _read_only(url)
    engine.dispose()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(normalized, engine_kwargs=kwargs, skip_table_creation=True)
    except (sa.exc.SQLAlchemyError, sqlite3.Error, RuntimeError, ValueError) as exc:
        raise _storage_error(shown, exc) from None


def check_schema(conn: sa.Connection, shown: str) -> None:
    """``SweepsError`` unless the database's Optuna schema is the one this Optuna writes: every
    reader refuses what ``status`` (through Optuna's own check) refuses, rather than ``report``
    and ``export`` reading tables whose meaning may have changed. Nothing is written."""
    from alembic.runtime.migration import MigrationContext

    current = MigrationContext.configure(conn).get_current_revision()
    if current is None:
        return  # no alembic stamp yet: Optuna's own open decides
    script = optuna_compat.schema_migrations()
    head = script.get_current_head()
    if current == head:
        return
    masked = mask_url(shown)
    if current in {r.revision for r in script.walk_revisions()}:
        raise SweepsError(
            f"storage {masked} has an older Optuna schema ({current}, this Optuna "
            f"reads {head}); upgrade it with `optuna storage upgrade --storage "
            f"{masked}`"
        )
    raise SweepsError(
        f"storage {masked} was written by a newer Optuna (schema {current}, this "
        f"one reads {head}); upgrade Optuna (`pip install -U optuna`)"
    )


def require_sweeps_database(conn: sa.Connection, shown: str) -> None:
    """``SweepsError`` unless the database holds Optuna's tables (those of sweeps' studies)."""
    names = set(sa.inspect(conn).get_table_names())
    if not {"studies", "version_info"} <= names:
        raise SweepsError(
            f"storage {mask_url(shown)} is not a sweeps database: it holds no "
            "Optuna study (no `studies` table); check --storage, or run a study "
            "first with `sweeps run SPEC`"
        )


def _read_only(url: str) -> tuple[sa.Engine, str, dict[str, Any], str]:
    """(checked engine, normalized URL, engine settings, URL as written) for the readers."""
    shown, url = url, normalize_url(url)
    parsed = sa.engine.make_url(url)
    kwargs = (
        _sqlite_read_only_kwargs(shown, parsed)
        if parsed.get_backend_name() == "sqlite"
        else _engine_kwargs(url, shown)
    )  # PostgreSQL: readers issue no DDL at all
    engine = sa.create_engine(url, **kwargs)
    try:
        with engine.connect() as conn:
            require_sweeps_database(conn, shown)
            check_schema(conn, shown)
    except SweepsError:
        engine.dispose()
        raise
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        engine.dispose()
        raise _storage_error(shown, exc) from None
    return engine, url, kwargs, shown


def _is_a_directory(url: str, path: Path) -> SweepsError:
    return SweepsError(
        f"storage {mask_url(url)}: {path} is a directory; give a file path, "
        "e.g. sqlite:///sweeps.db"
    )


def _sqlite_read_only_kwargs(url: str, parsed: sa.URL) -> dict[str, Any]:
    database = parsed.database or ""
    if database.startswith("file:") or parsed.query.get("uri") == "true":
        return {}  # the URI form: opened as written
    path = Path(database).expanduser()
    if path.is_dir():  # not "does not exist": it does, as a directory
        raise _is_a_directory(url, path)
    if not path.is_file():
        raise SweepsError(
            f"no database at {mask_url(url)} ({path} does not exist); run a study "
            "first with `sweeps run SPEC`, or pass --storage"
        )
    target = path.resolve().as_uri()

    def connect() -> sqlite3.Connection:
        # A WAL database that no process has open (no -wal file) is opened immutable: plain
        # mode=ro would create -wal and -shm next to it (and cannot open it at all on a
        # read-only mount). While a writer has it open, mode=ro reads through its WAL.
        idle = _wal_mode(path) and not Path(f"{path}-wal").exists()
        uri = f"{target}?mode=ro" + ("&immutable=1" if idle else "")
        conn = sqlite3.connect(uri, uri=True, timeout=SQLITE_TIMEOUT_S, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(SQLITE_TIMEOUT_S * 1000)}")
        return conn

    return {"creator": connect, "pool_pre_ping": True}


def _wal_mode(path: Path) -> bool:
    """Whether a SQLite file's header says WAL (bytes 18 and 19, the format versions, are 2)."""
    try:
        with path.open("rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return header.startswith(b"SQLite format 3\x00") and header[18:20] == b"\x02\x02"


def describe_error(exc: BaseException) -> str:
    """An exception as one line, ``Type: message``; for a database error the driver's own type
    and first line, never SQLAlchemy's ``[SQL: ...]`` and ``[parameters: ...]`` (kilobytes of
    a model's text, and the values of whatever was written)."""
    orig = getattr(exc, "orig", None) if isinstance(exc, sa.exc.StatementError) else None
    source = orig if isinstance(orig, BaseException) else exc
    lines = str(source).strip().splitlines()
    first = lines[0].strip() if lines else ""
    if isinstance(source, sa.exc.StatementError):
        first = first.split(" [SQL:")[0]  # a wrapped non-driver error carries its SQL inline
    first = first[:300] + ("..." if len(first) > 300 else "")
    return f"{type(source).__name__}: {first}" if first else type(source).__name__


def _storage_error(url: str, exc: BaseException) -> SweepsError:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = _scrub(detail[0].strip() if detail else type(exc).__name__, url)
    masked = mask_url(url)
    if "password" in first.lower():
        first = "authentication failed"
    parsed = _parsed(url)
    if parsed is not None and "@" in (parsed.host or ""):
        hint = "write an @ in the password as %40 (the URL's host part holds an @)"
    elif "no longer compatible" in first or ("schema" in first.lower() and "version" in first):
        hint = f"upgrade it with `optuna storage upgrade --storage {masked}`"
    elif url.startswith("sqlite"):
        hint = _sqlite_hint(first)
    else:
        hint = (
            "check host, port, user and database name (create the database first, e.g. "
            "`createdb sweeps`), or use sqlite:///sweeps.db"
        )
    return SweepsError(" ".join(f"cannot open storage {masked}: {first}; {hint}".split()))


#: SQLite's words for a failure, and what to do about it: a read-only file or a full disk is
#: not a damaged database, and "check the file is a SQLite database" sent people the wrong way.
_SQLITE_HINTS = (
    (
        "readonly",
        "the file or its directory is read-only: make both writable (SQLite writes a "
        "journal beside the file) or copy the database somewhere writable",
    ),
    ("disk is full", "the disk is full: free some space"),
    ("disk i/o error", "the disk failed or is full: check it and free some space"),
    ("unable to open", "check that the file and its directory exist and are readable and writable"),
)


def _sqlite_hint(first: str) -> str:
    lowered = first.lower()
    return next(
        (hint for words, hint in _SQLITE_HINTS if words in lowered),
        "check the file is a SQLite database written by sweeps/Optuna",
    )


def _parsed(url: str) -> sa.URL | None:
    try:
        return sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return None


def _scrub(text: str, url: str) -> str:
    """``text`` (a driver's message) without any part of the URL's password: a literal ``@``
    in it leaves the rest in the host, which the driver names (``failed to resolve host``)."""
    parsed = _parsed(url)
    if parsed is None:
        return text
    host = parsed.host or ""
    if "@" in host:
        leaked, _, clean = host.rpartition("@")
        text = text.replace(host, f"***@{clean}").replace(leaked, "***")
    secrets = [parsed.password or ""] + [
        str(v) for k, v in parsed.query.items() if k.lower() == "password"
    ]
    for secret in filter(None, secrets):
        text = text.replace(secret, "***")
    return text


_CALLBACK_ARG = optuna_compat.stale_callback_arg()
