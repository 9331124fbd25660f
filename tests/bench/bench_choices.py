"""Benchmark: a ``[space]`` with many categorical choices (issue 34, item 2).

``lr = [100,000 distinct floats]`` once kept ``sweeps run SPEC --dry-run`` busy for more than 10
minutes and ``sweeps estimate SPEC`` for more than 4: the choices were checked for repeats by
comparing each with every one kept (quadratic), every choice was probed with a config and a
memory estimate, and the dry run printed them all. For 10 (the fixed cost: start-up, imports),
10^3, 10^4 and 10^5 choices this prints, side by side, each command's wall and CPU time (the
commands run as a user runs them, one process each, on a prepared synthetic corpus) and how
many lines the dry run prints.

    .venv/bin/python tests/bench/bench_choices.py [--sizes 10,1000,10000,100000]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = (10, 1_000, 10_000, 100_000)


def write_spec(directory: Path, n: int) -> Path:
    """A study whose one searched field, ``lr``, has ``n`` distinct choices."""
    lrs = ", ".join(repr(1e-4 + i * 1e-9) for i in range(n))
    path = directory / f"choices{n}.toml"
    path.write_text(
        f"""
[study]
name = "choices{n}"
n_trials = 5
sampler = "random"
[corpus]
dir = "corpus"
[fixed]
d_model = 32
n_layers = 1
n_heads = 2
d_ff = 64
seq_len = 32
batch_size = 4
max_tokens = 20000
warmup_tokens = 2000
eval_every_tokens = 5000
[space]
lr = [{lrs}]
""",
        encoding="utf-8",
    )
    return path


def timed(args: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, lines it printed) of one ``sweeps`` command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # 1: estimate's "does not fit"; anything else is a bug
        raise SystemExit(f"sweeps {' '.join(args)} failed: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, len(proc.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="numbers of choices, comma-separated"
    )
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sweeps",
                "prepare",
                "--synthetic",
                "--size",
                "200KB",
                "--out",
                str(work / "corpus"),
            ],
            check=True,
            capture_output=True,
        )
        print(
            f"{'choices':>8} {'dry run wall s':>15} {'cpu s':>6} {'lines':>6} "
            f"{'estimate wall s':>16} {'cpu s':>6}"
        )
        for n in sizes:
            spec = write_spec(work, n)
            dry = timed(
                ["run", str(spec), "--dry-run", "--storage", f"sqlite:///{work / 'db.sqlite'}"],
                work,
            )
            est = timed(["estimate", str(spec)], work)
            print(
                f"{n:>8,} {dry[0]:>15.2f} {dry[1]:>6.2f} {dry[2]:>6} {est[0]:>16.2f} "
                f"{est[1]:>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
