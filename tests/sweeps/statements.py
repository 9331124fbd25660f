"""The SQL statements a command sends, counted, and a ``kill -9`` of a command at one of them.

``Statements`` records every statement SQLAlchemy sends from this process (an event on every
engine), so a test can say how many a copy or a ``status`` takes and which tables they read.

``sweeps_killed_at`` runs ``python -m sweeps ARGS`` in a fresh process that SIGKILLs itself
just before its N-th write (INSERT, UPDATE or DELETE) to a database of one dialect: a ``kill
-9`` at a point of the command's work chosen by what it has written, never by a clock.
``N = 0`` kills nothing and prints the number of writes instead (to size the kill points).

    python -m tests.sweeps.statements DIALECT N sweeps ARGS...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
WRITES = ("INSERT", "UPDATE", "DELETE")
#: The line the counting run prints last on stderr: ``writes: N``.
COUNT_PREFIX = "writes: "


@dataclass
class Statement:
    dialect: str
    sql: str
    executemany: bool
    rows: int  # parameter sets sent with it
    values: int  # values bound in them (an IN of 30 trial ids: 30)

    @property
    def write(self) -> bool:
        return self.sql.lstrip().upper().startswith(WRITES)


@dataclass
class Statements:
    """Every statement sent inside ``with Statements() as s:``."""

    seen: list[Statement] = field(default_factory=list)

    def __enter__(self) -> Statements:
        sa.event.listen(sa.Engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(sa.Engine, "before_cursor_execute", self._record)

    def _record(
        self,
        conn: sa.Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        # SQLAlchemy's batched INSERT ... RETURNING (insertmanyvalues) sends one flat set.
        many = executemany and all(isinstance(p, (tuple, list, dict)) for p in parameters)
        sets = list(parameters) if many else [parameters]
        values = sum(len(p) for p in sets if p is not None)
        self.seen.append(Statement(conn.dialect.name, statement, executemany, len(sets), values))

    def touching(self, table: str) -> list[Statement]:
        """The statements that name ``table`` (as a whole word)."""
        import re

        word = re.compile(rf"\b{re.escape(table)}\b")
        return [s for s in self.seen if word.search(s.sql)]


def sweeps_killed_at(
    dialect: str, n: int, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``sweeps ARGS`` in a process killed (SIGKILL) just before its ``n``-th write to a
    ``dialect`` database; ``n = 0``: not killed, its writes counted (``writes_of``)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.sweeps.statements", dialect, str(n), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def writes_of(proc: subprocess.CompletedProcess[str]) -> int:
    """The writes a counting run (``n = 0``) made; it must have succeeded."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(COUNT_PREFIX), proc.stderr[-3000:]
    return int(last.removeprefix(COUNT_PREFIX))


def main() -> None:
    dialect, n, *args = sys.argv[1:]
    kill_at, writes = int(n), 0

    def count(conn: sa.Connection, cursor: Any, statement: str, *rest: Any) -> None:
        nonlocal writes
        if conn.dialect.name == dialect and statement.lstrip().upper().startswith(WRITES):
            writes += 1
            if writes == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    sa.event.listen(sa.Engine, "before_cursor_execute", count)
    from sweeps import cli

    sys.argv = ["sweeps", *args]
    try:
        cli.main()
    finally:
        print(f"{COUNT_PREFIX}{writes}", file=sys.stderr)


if __name__ == "__main__":
    main()
