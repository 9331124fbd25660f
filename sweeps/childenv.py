"""The environment a trial's child (and the fork server that forks it) starts from: this
process's, less the database's credentials. A child trains from its run dir and writes files;
it never opens the database, so it is not given the URL or a password to it, which anyone who
can read ``/proc/PID/environ`` of a child, or a crash dump of one, would otherwise see (#34).

Imports nothing heavy: the fork server's process imports it before torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

#: The variable that holds the study's database URL (``sweeps.storage`` reads it).
STORAGE_ENV_VAR = "SWEEPS_STORAGE"
#: Variables libpq (PostgreSQL's client) reads a password, or a file or service of them, from.
LIBPQ_SECRETS = ("PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE")
#: A URL with a password in its user info (``scheme://user:password@host``), in any variable
#: (``DATABASE_URL`` and the like).
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")


def is_secret(name: str, value: str) -> bool:
    """Whether a variable carries a database credential a trial's child must not inherit."""
    return name in (STORAGE_ENV_VAR, *LIBPQ_SECRETS) or bool(_URL_WITH_PASSWORD.search(value))


def child_environ(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (this process's environment) without its credentials, then ``extra`` on top."""
    base = os.environ if base is None else base
    return {**{k: v for k, v in base.items() if not is_secret(k, v)}, **(extra or {})}
