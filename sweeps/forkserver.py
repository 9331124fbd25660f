"""A preloaded fork server: trial children that start in milliseconds, not seconds.

A fresh ``python -m lm.train`` pays for ``import torch`` and, at its first optimizer, for
``torch._dynamo`` (AdamW imports it): about three seconds before it trains anything. The fork
server is one process that imports all of that once (and initializes no CUDA, runs no torch op,
so no thread pool exists to be broken by ``fork``), then forks one child per trial. Each child is
still a separate process running ``lm.train.main([RUN_DIR])`` exactly as ``python -m lm.train``
would: its own session and process group (the runner signals the group), the trial's memory
limit (``cpu_memory_limit_bytes`` in its config, applied by ``lm.train``), its own environment
(``CUDA_VISIBLE_DEVICES``, ``SWEEPS_NUM_THREADS``) and CPU affinity, its output in a log file.

Protocol (a Linux abstract Unix socket: no file to leave behind, even after ``kill -9``; the
server accepts connections only from the process that started it, checked with
``SO_PEERCRED``; one connection per trial, JSON lines):
client -> ``{"run_dir", "log", "env", "cpus"}``; server -> ``{"pid": N}`` (or ``{"error"}``),
then ``{"returncode": rc}`` when the child ends (negative: killed by that signal, as
``subprocess`` reports it). The client closing the connection early kills the child's group.

Nothing outlives the orchestrator: the server gets SIGKILL when the process that started it dies
(``PR_SET_PDEATHSIG``), and exits, killing its children, when its stdin (a pipe from that
process) reaches end-of-file; each child gets SIGKILL when the server dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import IO, Any

from lm.errors import SweepsError
from sweeps.childenv import child_environ
from sweeps.deathsig import load_prctl, set_parent_death_signal

#: Modules the server imports before forking (everything a training child imports).
PRELOAD = (
    "numpy",
    "torch",
    "torch.nn.functional",
    "torch.optim",
    "torch._dynamo",
    "tiktoken",
    "lm.config",
    "lm.corpus",
    "lm.tokenizers",
    "lm.tokens",
    "lm.model",
    "lm.metrics",
    "lm.train",
)
#: Seconds to wait for the server to finish its imports.
START_TIMEOUT_S = 120.0


def available() -> bool:
    """The fork server needs Linux (fork, prctl, Unix sockets, pidfds)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


# --- the client (in the orchestrator) ---------------------------------------------------------


class ForkChild:
    """A trial child forked by the server; the same small interface as ``launchers.PopenChild``."""

    def __init__(self, conn: socket.socket, pid: int, buffer: bytes = b"") -> None:
        self.pid = pid
        self._conn = conn
        #: What the server sent after the pid line: a child that ended at once may have its
        #: return code in the same read.
        self._buffer = buffer
        self.returncode: int | None = None
        #: The server went away before reporting: the child died with it (parent-death signal).
        self.lost = False

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if b"\n" not in self._buffer:
            try:
                self._conn.setblocking(False)
                data = self._conn.recv(4096)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError:
                data = b""
            if not data:  # the server is gone: so is the child (it had PDEATHSIG)
                self.returncode, self.lost = -signal.SIGKILL, True
                return self.returncode
            self._buffer += data
        if b"\n" in self._buffer:
            line = self._buffer.split(b"\n", 1)[0]
            self.returncode = int(json.loads(line)["returncode"])
            self._conn.close()
        return self.returncode

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the child's process group (it leads its own session)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        return self.returncode

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


class ForkServer:
    """Start a server (``start``), fork trial children from it (``launch``), stop it (``close``).

    Thread-safe: each launch has its own connection. Start it from the main thread where
    possible: the parent-death signal follows the thread that started the server.
    """

    kind = "fork"  # the memory plan's name for a child forked from here

    def __init__(self) -> None:
        self._name: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def socket_address(self) -> str:
        assert self._name is not None
        return "\0" + self._name  # the abstract namespace: a name, not a file

    def start(self) -> ForkServer:
        with self._lock:
            self._start()
        return self

    def _start(self) -> None:
        if not available():
            raise SweepsError("the fork server needs Linux; use --launcher subprocess")
        self._name = f"sweeps-fork-{os.getpid()}-{uuid.uuid4().hex}"
        main_thread = threading.current_thread() is threading.main_thread()
        load_prctl()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "sweeps.forkserver", self._name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            env=child_environ(),  # its children inherit it: no database credentials in it
            preexec_fn=set_parent_death_signal if main_thread else None,
        )
        assert self._proc.stdout is not None
        ready = _readline_with_timeout(self._proc.stdout, START_TIMEOUT_S)
        if ready.strip() != b"ready":
            self._stop()
            raise SweepsError(
                f"the fork server did not start (it said {ready[:200]!r}); "
                "use --launcher subprocess"
            )

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cpus: list[int] | None = None,
    ) -> ForkChild:
        with self._lock:
            if self._proc is None:
                raise SweepsError("the fork server is not running; start it first")
            if self._proc.poll() is not None:  # it died (e.g. the OOM killer chose it): again
                self._stop()
                self._start()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(30.0)
        conn.connect(self.socket_address)
        request = {"run_dir": str(run_dir), "log": str(log_path), "env": env or {}, "cpus": cpus}
        conn.sendall(json.dumps(request).encode() + b"\n")
        reply, rest = read_reply(conn)
        if "error" in reply:
            conn.close()
            raise SweepsError(f"the fork server could not start the trial: {reply['error']}")
        return ForkChild(conn, int(reply["pid"]), rest)

    def close(self) -> None:
        """Stop the server (its remaining children are killed) and remove its socket."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()  # end-of-file: the server kills its children and exits
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self._name = None

    def __enter__(self) -> ForkServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_reply(conn: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The server's first line on ``conn`` (the pid, or an error) and whatever came after it in
    the same reads: the return code of a child that ended at once can arrive with its pid."""
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise SweepsError(
                "the fork server closed the connection before starting the "
                "trial; use --launcher subprocess"
            )
        data += chunk
    line, rest = data.split(b"\n", 1)
    return json.loads(line), rest


def _readline_with_timeout(stream: IO[bytes], timeout: float) -> bytes:
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            return b""
        return stream.readline()
    finally:
        sel.close()


# --- the server ---------------------------------------------------------------------------------


class _Server:
    def __init__(self, name: str) -> None:
        self.sel = selectors.DefaultSelector()
        self.client_pid = os.getppid()  # the orchestrator: the only process served
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind("\0" + name)
        self.listener.listen(64)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
        self.requests: dict[socket.socket, bytes] = {}
        self.children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (conn, pidfd)
        self.by_conn: dict[socket.socket, int] = {}

    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select(timeout=1.0):
                kind = key.data
                if kind == "accept":
                    conn, _ = self.listener.accept()
                    if _peer_pid(conn) != self.client_pid:
                        conn.close()  # another process found the name: not ours to serve
                        continue
                    self.requests[conn] = b""
                    self.sel.register(conn, selectors.EVENT_READ, "conn")
                elif kind == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        self.shutdown()
                        return
                elif kind == "conn":
                    self.on_conn(key.fileobj)  # type: ignore[arg-type]
                else:
                    self.reap(kind[1])

    def on_conn(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if conn in self.by_conn:  # a running child's client: only end-of-file is expected
            if not data:
                pid = self.by_conn[conn]
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # its orchestrator is gone
                self.sel.unregister(conn)
            return
        if not data:
            self.sel.unregister(conn)
            self.requests.pop(conn, None)
            conn.close()
            return
        self.requests[conn] += data
        if b"\n" not in self.requests[conn]:
            return
        line = self.requests.pop(conn).split(b"\n", 1)[0]
        try:
            request = json.loads(line)
            pid = self.spawn(request)
        except Exception as exc:  # a bad request must not take the server down
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            self.sel.unregister(conn)
            conn.close()
            return
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd)
        self.by_conn[conn] = pid
        self.sel.register(pidfd, selectors.EVENT_READ, ("child", pid))
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")

    def spawn(self, request: dict[str, Any]) -> int:
        run_dir, log = str(request["run_dir"]), str(request["log"])
        env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
        cpus = request.get("cpus")
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the trial child: never returns
            code = 1
            try:
                os.setsid()
                set_parent_death_signal()
                if os.getppid() != server_pid:
                    os._exit(1)  # the server died between fork and prctl
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
                    signal.signal(sig, signal.SIG_DFL)
                self.close_fds()
                os.environ.update(env)
                if cpus:
                    os.sched_setaffinity(0, cpus)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
                sys.argv = ["lm.train", run_dir]
                from lm.train import main

                code = main([run_dir])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        return pid

    def close_fds(self) -> None:
        """In a child: drop the server's sockets, so a client's end-of-file means what it says."""
        with contextlib.suppress(OSError):
            self.listener.close()
        for conn in [*self.requests, *self.by_conn]:
            with contextlib.suppress(OSError):
                conn.close()
        for _, pidfd in self.children.values():
            with contextlib.suppress(OSError):
                os.close(pidfd)
        with contextlib.suppress(OSError):
            self.sel.close()

    def reap(self, pid: int) -> None:
        conn, pidfd = self.children.pop(pid)
        self.sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        self.by_conn.pop(conn, None)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"returncode": rc}).encode() + b"\n")
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn)
        conn.close()

    def shutdown(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[0])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m sweeps.forkserver SOCKET_NAME", file=sys.stderr)
        return 2
    # Ctrl-C goes to the orchestrator, which stops the trials itself; SIGTERM ends the server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    load_prctl()
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    server = _Server(args[0])
    signal.signal(signal.SIGTERM, lambda *_: (server.shutdown(), os._exit(0)))  # type: ignore[func-returns-value]  # a tuple, only to run both
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
