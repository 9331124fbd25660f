"""Benchmark: reading and reporting a large study, the times the test suite no longer caps.

The tests check what a 2,000-trial study reads and draws (``test_results``, ``test_report``);
how long it takes is printed here (a loaded CI machine took 22.2 s over the 20 s cap a test had).
For each size it fabricates a study as the runner records it (``tests/sweeps/fake_study.py``,
every outcome, curves and samples) and prints, side by side:

- load: ``results.load`` (the trials frame, the evaluations, the samples);
- report: ``report.write`` of the whole HTML page, and its size less plotly.js;
- per 1,000 trials: both, so sizes compare (near-linear is the target).

    .venv/bin/python tests/bench/bench_reading.py [--trials 500 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweeps import report, results
from tests.sweeps import fake_study


def measure(base: Path, n: int) -> dict[str, float]:
    url = fake_study.shared_big_study(base, n=n)
    started = time.perf_counter()
    data = results.load(url, "big")
    load_s = time.perf_counter() - started
    assert len(data.trials) == n
    out = base / f"big-{n}.html"
    started = time.perf_counter()
    report.write(url, "big", out)
    report_s = time.perf_counter() - started
    plotly_js = len(report.plotly.offline.get_plotlyjs().encode())
    return {
        "load_s": load_s,
        "report_s": report_s,
        "data_mib": (out.stat().st_size - plotly_js) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[500, 2000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(n, measure(Path(tmp), n)) for n in args.trials]
    print(
        f"{'trials':>7}  {'load s':>7}  {'report s':>8}  {'data MiB':>8}  "
        f"{'load s/1k':>9}  {'report s/1k':>11}"
    )
    for n, m in rows:
        print(
            f"{n:>7,}  {m['load_s']:>7.2f}  {m['report_s']:>8.2f}  {m['data_mib']:>8.2f}  "
            f"{m['load_s'] * 1000 / n:>9.2f}  {m['report_s'] * 1000 / n:>11.2f}"
        )


if __name__ == "__main__":
    main()
