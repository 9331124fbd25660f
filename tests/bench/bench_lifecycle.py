"""Benchmark: a large study's lifecycle commands, each as the user runs it (a process).

Issue #34 timed them on a 3,000-trial SQLite study: ``copy`` 8 min 13 s, ``delete`` 24 s,
``report`` 21 s, ``status`` 15.6 s and 376 MB, ``rename`` 2.5 s; the target is copy and delete
under 10 s and status under 2 s. For each storage (a SQLite file; a fresh database on the local
PostgreSQL server when it answers) it fabricates a study as the runner records it
(``tests/sweeps/fake_study.py``: every outcome, ~35 attributes a trial, curves, samples), then
runs, in order, ``status``, ``copy big big2``, ``rename big2 big3``, ``report big`` and
``delete big3``, and prints each one's wall time (interpreter start and imports included, as a
user waits for it) and its process's peak resident memory.

``--code DIR`` runs the commands from another source tree, for the figures before a change:
``git archive COMMIT | tar -x -C /tmp/before`` then ``--code /tmp/before``.

    .venv/bin/python tests/bench/bench_lifecycle.py [--trials 3000] [--code DIR]
        [--storages sqlite postgresql]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402

from sweeps import storage as st  # noqa: E402
from tests.sweeps import fake_study  # noqa: E402
from tests.sweeps.pg import bench_storages  # noqa: E402

COMMANDS = (
    ("status", ("status",)),
    ("copy", ("copy", "big", "big2")),
    ("rename", ("rename", "big2", "big3")),
    ("report", ("report", "big", "--out", "{tmp}/big.html")),
    ("delete", ("delete", "big3", "--yes")),
)


#: The command run in the child, which reports its own peak (``lm.rss.peak_rss_bytes``: the
#: parent's ``ru_maxrss`` of a child counts this bench's memory at the fork).
CHILD = """import sys
from lm.rss import peak_rss_bytes
from sweeps import cli
sys.argv = ["sweeps", *sys.argv[1:]]
try:
    cli.main()
finally:
    print(f"peak_rss_bytes {peak_rss_bytes()}", file=sys.stderr)
"""


def timed(args: list[str], code: Path, cwd: Path) -> tuple[float, float]:
    """(seconds, peak MiB) of ``sweeps ARGS`` in a fresh process run from the tree ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    took = time.perf_counter() - started
    last = proc.stderr.strip().splitlines()[-1]
    if proc.returncode != 0 or not last.startswith("peak_rss_bytes "):
        raise SystemExit(
            f"sweeps {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}"
        )
    return took, int(last.split()[1]) / 2**20


def measure(label: str, url: str, n: int, code: Path, tmp: Path) -> None:
    # The floor under every figure: an interpreter started, sweeps imported, a database opened.
    storage = st.open_storage(url)
    optuna.create_study(study_name="empty", storage=storage)
    storage.engine.dispose()
    seconds, mib = timed(["status", "--storage", url], code, tmp)
    print(
        f"  {label:<11} {'start':<7} {seconds:>8.2f} {mib:>9.0f}   (status of a study with "
        "no trials)",
        flush=True,
    )
    fake_study.fabricate(url, "big", n, seed=2)
    for name, args in COMMANDS:
        argv = [a.format(tmp=tmp) for a in args] + ["--storage", url]
        seconds, mib = timed(argv, code, tmp)
        print(f"  {label:<11} {name:<7} {seconds:>8.2f} {mib:>9.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument(
        "--code",
        type=Path,
        default=REPO,
        help="the source tree the commands run from [default: this one]",
    )
    parser.add_argument("--storages", nargs="+", default=["sqlite", "postgresql"])
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"lifecycle commands on a {args.trials:,}-trial study, code {args.code}"
            f"{f' ({head})' if head else ''}: wall seconds and peak MiB of each process "
            f"(load average {load} on {os.cpu_count()} CPUs)"
        )
        print(f"  {'storage':<11} {'command':<7} {'seconds':>8} {'peak MiB':>9}")
        for label, url, drop in bench_storages(f"sqlite:///{tmp / 'big.db'}"):
            try:
                if label in args.storages:
                    measure(label, url, args.trials, args.code, tmp)
            finally:
                if drop is not None:
                    drop()


if __name__ == "__main__":
    main()
