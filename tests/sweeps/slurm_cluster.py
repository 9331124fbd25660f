"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd, started as root
from a configuration written into a temporary directory, stopped by exactly the process ids
started here.

Everything is private to the directory: munge's key and socket, Slurm's state and spool dirs,
logs, two free loopback ports (``NoCtldInAddrAny,NoInAddrAny``: the daemons bind 127.0.0.1, not
every interface). The node is this host as ``slurmd -C`` reports it (its CPUs and memory),
with two GPUs *declared* on ``/dev/tty0`` and ``/dev/tty1`` so a GPU request is checked on a CPU
host (a count-only ``gres.conf`` line leaves the node INVAL: "gres/gpu count reported lower than
configured"). Clients find the cluster through ``SLURM_CONF`` (``Cluster.env``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def missing() -> str | None:
    """Why a cluster cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "a test Slurm cluster needs root (slurmd runs jobs as their user)"
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return (
            f"Slurm or munge is not installed ({', '.join(absent)} missing); "
            "make system-packages installs slurm-wlm and munge"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    root: Path
    node: str
    partition: str = "debug"
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            list(args), capture_output=True, text=True, timeout=60, env={**os.environ, **self.env}
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
            for p in sorted(self.root.glob("*.log"))
        )


def _node_line() -> tuple[str, str]:
    """(node name, its ``NodeName=...`` line) as ``slurmd -C`` sees this host."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=60).stdout
    line = next(x for x in out.splitlines() if x.startswith("NodeName="))
    name = line.split()[0].split("=", 1)[1]
    # slurmd -C prints the whole memory; leave a little for a kernel's rounding.
    line = re.sub(r"RealMemory=(\d+)", lambda m: f"RealMemory={int(m.group(1)) - 256}", line)
    return name, line


def _config(root: Path, node: str, node_line: str, ports: tuple[int, int]) -> str:
    return "\n".join(
        [
            "ClusterName=sweepstest",
            f"SlurmctldHost={node}(127.0.0.1)",
            f"SlurmctldPort={ports[0]}",
            f"SlurmdPort={ports[1]}",
            "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
            "AuthType=auth/munge",
            "CryptoType=crypto/munge",
            f"AuthInfo=socket={root / 'munge.socket'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "GresTypes=gpu",
            "MinJobAge=3600",
            "KillWait=30",  # Slurm's default: a worker has time to re-queue its trials
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            f"{node_line} NodeAddr=127.0.0.1 Gres=gpu:2 State=UNKNOWN",
            f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@contextlib.contextmanager
def one_node_cluster(root: Path, *, timeout: float = 120) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd under ``root``; yield once the node is idle; stop
    exactly the processes started here (and cancel the jobs left) on exit."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # munged refuses a world-writable directory
    for sub in ("state", "spool"):
        (root / sub).mkdir(exist_ok=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    node, node_line = _node_line()
    cluster = Cluster(root, node)
    cluster.conf.write_text(_config(root, node, node_line, (_free_port(), _free_port())))
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File=/dev/tty[0-1]\n")
    env = {**os.environ, **cluster.env}
    procs = cluster.procs
    try:
        for argv in (
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={root / 'munge.socket'}",
                f"--pid-file={root / 'munged.pid'}",
                f"--log-file={root / 'munged.log'}",
                f"--seed-file={root / 'munge.seed'}",
            ],
            ["slurmctld", "-D", "-c", "-f", str(cluster.conf)],
            ["slurmd", "-D", "-N", node, "-f", str(cluster.conf)],
        ):
            with open(root / f"{argv[0]}.stderr.log", "wb") as log:  # the child keeps its own
                procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log))
            if argv[0] == "munged":
                _wait(lambda: (root / "munge.socket").exists(), timeout, "munged's socket", cluster)
        _wait(
            lambda: _node_state(cluster) in ("idle", "idle*"),
            timeout,
            "the node to be idle",
            cluster,
        )
        yield cluster
    finally:
        # Jobs first, and wait for them to end: a job's slurmstepd and its processes outlive
        # slurmd by design (a daemon restart keeps jobs running).
        with contextlib.suppress(Exception):
            cluster.run("scancel", "--user=root", check=False)
            _wait(
                lambda: not cluster.run("squeue", "-h", check=False).strip(),
                90,
                "the jobs to end",
                cluster,
            )
        for proc in reversed(procs):  # slurmd first: it reports its jobs' ends to slurmctld
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _node_state(cluster: Cluster) -> str:
    try:
        return cluster.run("sinfo", "-h", "-N", "-o", "%t", check=False).strip()
    except Exception:
        return ""


def _wait(condition, timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for proc in cluster.procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{proc.args[0]} exited ({proc.returncode}) waiting for "
                    f"{what}:\n" + cluster.logs()
                )
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}:\n{cluster.logs()}")
