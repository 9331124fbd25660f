"""A CPU run's threads are chosen from what is measured (#34, item 8): the micro-step's FLOPs
and the cores other work keeps busy. On a busy 2-core machine a first-screen ``train`` took 89 s
on every core and 26 s on one. The rule's numbers come from tests/bench/bench_threads.py; here,
the rule itself, the load measured from /proc/stat with a real CPU-bound process, and what a
timeout says of the CPU time it had."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from lm import host

BIG_STEP = 50 * host.FLOPS_PER_THREAD  # wants many threads
TINY_STEP = host.FLOPS_PER_THREAD / 10  # the README's first screen is 0.4 GFLOP


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(host.NUM_THREADS_ENV, raising=False)


def test_a_small_step_runs_on_one_thread_whatever_the_load() -> None:
    choice = host.trial_threads([0, 1, 2, 3], TINY_STEP, busy=0.0)
    assert choice.threads == 1
    assert "0.2 GFLOP" in choice.reason and "under" in choice.reason, choice.reason
    assert host.useful_threads(2 * host.FLOPS_PER_THREAD - 1) == 1
    assert host.useful_threads(2 * host.FLOPS_PER_THREAD) == 2


@pytest.mark.parametrize(
    ("cores", "busy", "want"),
    [
        (2, 0.0, 2),
        (2, 0.3, 2),
        (2, 1.0, 1),
        (2, 1.9, 1),
        (2, 2.0, 1),
        (8, 3.0, 5),
        (8, 0.0, 8),
        (1, 0.0, 1),
    ],
)
def test_a_big_step_takes_the_cores_other_work_leaves(cores: int, busy: float, want: int) -> None:
    choice = host.trial_threads(list(range(cores)), BIG_STEP, busy=busy)
    assert choice.threads == want
    assert f"{busy:.1f} of its {cores} cores busy" in choice.reason or cores == 1


def test_the_variable_overrides_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(host.NUM_THREADS_ENV, "3")
    assert host.trial_threads([0, 1], TINY_STEP, busy=2.0) == (2, "SWEEPS_NUM_THREADS=3")
    assert host.trial_threads(list(range(8)), TINY_STEP, busy=8.0).threads == 3
    assert host.run_threads("cpu", TINY_STEP) == min(3, len(host.cpu_ids()))


def test_a_cpu_run_of_a_small_model_takes_one_thread_not_every_core() -> None:
    assert host.run_threads("cpu", TINY_STEP) == 1
    assert host.run_threads("cpu") == len(host.cpu_ids())  # step unknown: the most it may take


@pytest.fixture
def hog() -> Iterator[subprocess.Popen]:
    """A CPU-bound process pinned to this process's first core; killed by its pid."""
    core = host.cpu_ids()[0]
    proc = subprocess.Popen(
        [sys.executable, "-c", "while 1: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core})
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the load is read from /proc/stat")
def test_a_core_a_process_keeps_busy_is_measured_busy(hog: subprocess.Popen) -> None:
    core = host.cpu_ids()[0]
    # The hog's share of its core, whatever else runs: the core itself is never idle.
    assert host.busy_cores([core], sample_s=0.5) >= 0.5
    cores = host.cpu_ids()
    assert host.trial_threads(cores, BIG_STEP).threads <= max(1, len(cores) - 1)
    used = host.process_cpu_s(hog.pid)
    assert used is not None and used > 0


def test_a_timeout_says_whether_the_machine_was_busy() -> None:
    busy = host.cpu_time_text(30.0, 180.0, 2)
    assert busy.startswith("30 s of CPU in 180 s on 2 threads (8% of what they could use)")
    assert "the machine was busy" in busy
    slow = host.cpu_time_text(170.0, 180.0, 1)
    assert "94%" in slow and "it had its cores" in slow
    assert host.cpu_time_text(None, 180.0, 1) == "its CPU time could not be read"
    assert host.process_cpu_s(2**22 + 12345) is None  # no such process
