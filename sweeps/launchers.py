"""How a trial's child process starts: the ``Child``/``Launcher`` interface the runner uses, the
plain subprocess launcher (a child never outlives its orchestrator: ``sweeps.deathsig``), and
the choice between it and the preloaded fork server (``sweeps.forkserver``).

Every child is ``python -m lm.train RUN_DIR`` (or the same entry forked from the fork server),
leader of its own session and process group, so a prune signals the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from lm.errors import SweepsError
from sweeps import forkserver
from sweeps.childenv import child_environ
from sweeps.deathsig import load_prctl, set_parent_death_signal

#: ``sweeps run --launcher``: what ``auto`` may pick, and the two launchers.
LAUNCHER_KINDS = ("auto", "fork", "subprocess")


# --- launchers -----------------------------------------------------------------------------------


class Child(Protocol):
    pid: int

    def poll(self) -> int | None: ...

    def signal(self, sig: int) -> None: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    #: How its CPU children start, as the memory plan counts it (``lm.memory.LAUNCHERS``: a
    #: forked child's baseline can differ from a fresh interpreter's).
    kind: str

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cpus: list[int] | None = None,
    ) -> Child: ...

    def close(self) -> None: ...


class PopenChild:
    """``python -m lm.train RUN_DIR`` as a plain subprocess, leader of its own process group."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait()


class SubprocessLauncher:
    """One fresh interpreter per trial (portable; pays the imports every time)."""

    kind = "subprocess"

    def __init__(self) -> None:
        load_prctl()

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cpus: list[int] | None = None,
    ) -> PopenChild:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lm.train", str(run_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_environ(env),  # no database credentials: a child never opens it
                start_new_session=True,  # its own group: a prune signals the whole group
                # SIGKILL when this thread's process dies, even by kill -9 (Linux).
                preexec_fn=set_parent_death_signal if sys.platform.startswith("linux") else None,
            )
        if cpus and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(proc.pid, cpus)
        return PopenChild(proc)

    def close(self) -> None:
        pass


def make_launcher(kind: str) -> Launcher:
    """A started launcher: ``fork`` (the fork server), ``subprocess``, or ``auto`` (the fork
    server where it works: Linux)."""
    if kind == "auto":
        kind = "fork" if forkserver.available() else "subprocess"
    if kind == "fork":
        return forkserver.ForkServer().start()
    if kind == "subprocess":
        return SubprocessLauncher()
    raise SweepsError(f"unknown launcher {kind!r}; use fork, subprocess or auto")
