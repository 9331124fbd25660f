"""The local engine: admission by predicted memory (a pool with reserve/release on a fake host),
waiting first come first served, the per-trial budget, worker threads that wait for room, and a
real packed run on the CPU."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from lm import outcomes
from sweeps import admission as local
from sweeps import preflight
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.runner import RunnerContext, TrialReport, WorkerDevice, finish
from sweeps.space import suggest, trial_config
from sweeps.spec import Limits, read_spec
from tests.sweeps.helpers import spec_dict, sweeps_run, toml_text

MiB = 2**20


def gpus(*sizes: int) -> local.MemoryPool:
    """A fake host of GPUs of these capacities (bytes)."""
    return local.MemoryPool(
        [
            local.PoolDevice(f"gpu {i}", "cuda", s, {"CUDA_VISIBLE_DEVICES": str(i)})
            for i, s in enumerate(sizes)
        ]
    )


# --- the pool (pure) -----------------------------------------------------------------------------


def test_reservations_never_exceed_a_device() -> None:
    pool = gpus(1000, 600)
    rng = random.Random(0)
    held: list[local.Lease] = []
    for _ in range(2000):
        if held and rng.random() < 0.45:
            pool.release(held.pop(rng.randrange(len(held))))
            continue
        lease = pool.try_reserve(rng.randint(1, 700))
        if lease is not None:
            held.append(lease)
        for i, d in enumerate(pool.devices):
            mine = [le.bytes for le in held if le.index == i]
            assert sum(mine) == pool.used[i] and len(mine) == pool.running[i]
            assert sum(mine) <= d.capacity
    for lease in held:
        pool.release(lease)
    assert pool.used == [0, 0] and pool.running == [0, 0]


def test_placement_spreads_trials_and_pins_each_to_its_gpu() -> None:
    pool = gpus(1000, 1000)
    a, b = pool.try_reserve(100), pool.try_reserve(100)
    assert a is not None and b is not None
    assert {a.device.env["CUDA_VISIBLE_DEVICES"], b.device.env["CUDA_VISIBLE_DEVICES"]} == {
        "0",
        "1",
    }
    big = pool.try_reserve(950)
    assert big is None  # 100 held on each: room for 900, not 950
    pool.release(a)
    big = pool.try_reserve(950)
    assert big is not None and big.index == a.index  # the device that emptied


def test_a_trial_that_fits_only_the_larger_device_goes_there() -> None:
    pool = gpus(500, 2000)
    lease = pool.try_reserve(1500)
    assert lease is not None and lease.device.label == "gpu 1"
    assert pool.try_reserve(600) is None  # too big for gpu 0, no room left on gpu 1
    assert pool.fits_empty(2000) and not pool.fits_empty(2001)


def test_cpu_trials_get_their_own_cores() -> None:
    pool = local.MemoryPool([local.PoolDevice("cpu", "cpu", 10_000, {}, (0, 1, 2, 3, 4), 2)])
    a, b = pool.try_reserve(10), pool.try_reserve(10)
    assert a is not None and b is not None
    assert set(a.cores).isdisjoint(b.cores) and len(a.cores) == len(b.cores) == 2
    assert a.device.env["SWEEPS_NUM_THREADS"] == "2" and a.device.cpus == list(a.cores)
    assert pool.try_reserve(10) is None  # one core left: not enough for two threads
    pool.release(a)
    assert pool.try_reserve(10) is not None


def test_the_budget_is_what_an_empty_device_takes() -> None:
    pool = gpus(1000 * MiB, 3000 * MiB)
    budget = local.trial_budget(Limits(memory_budget="auto"), pool)
    assert local.reservation(budget) <= 3000 * MiB < local.reservation(budget + 1)
    assert local.trial_budget(Limits(memory_budget=MiB), pool) == MiB
    assert local.trial_budget(Limits(memory_budget=None), pool) is None
    # The plan with that budget: a trial over it is predicted_oom, one under it is admitted.
    assert pool.try_reserve(local.reservation(budget)) is not None


def test_concurrency_follows_the_devices_unless_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWEEPS_NUM_THREADS", raising=False)
    assert local.cpu_threads_per_trial(8, None) == 8  # a CPU trial gets every core by default
    assert local.cpu_threads_per_trial(8, 3) == 2
    cpu = local.MemoryPool([local.PoolDevice("cpu", "cpu", 100, {}, tuple(range(8)), 2)])
    assert local.concurrency(cpu, None) == 4
    assert local.concurrency(cpu, 3) == 3
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    lease = cpu.try_reserve(1)
    assert lease is not None and lease.device.env["SWEEPS_NUM_THREADS"] == "1"
    assert len(lease.cores) == 2
    # GPU trials: as many as memory admits, up to one core to drive each.
    assert local.concurrency(gpus(1, 1), None, n_cores=16) == 16


# --- waiting -------------------------------------------------------------------------------------


def test_a_big_trial_waits_for_room_and_is_not_overtaken() -> None:
    admission = local.Admission(gpus(local.reservation(1000)), poll_s=0.05)
    stop = threading.Event()
    small = admission.acquire(600, stop)
    assert small is not None
    order: list[str] = []

    def take(name: str, predicted: int) -> None:
        lease = admission.acquire(predicted, stop)
        order.append(name)
        time.sleep(0.05)
        admission.release(lease)

    big = threading.Thread(target=take, args=("big", 900))
    big.start()
    time.sleep(0.2)
    later = threading.Thread(target=take, args=("later small", 100))  # would fit now
    later.start()
    time.sleep(0.2)
    assert order == []  # the big one waits for room, the small one behind it
    admission.release(small)
    big.join(5)
    later.join(5)
    assert order == ["big", "later small"]


def test_a_stop_ends_the_wait() -> None:
    admission = local.Admission(gpus(100), poll_s=0.05)
    stop = threading.Event()
    held = admission.acquire(80, stop)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(admission.acquire(50, stop)))
    waiter.start()
    stop.set()
    waiter.join(5)
    assert got == [None] and held is not None


# --- worker threads on a fake device pool --------------------------------------------------------


def fake_trial(log: list[tuple[str, int, int]], lock: threading.Lock, sizes: dict[int, int]):
    """A ``run`` for ``worker_loop``: admission by its size, a short sleep, COMPLETE."""

    def run(ctx: RunnerContext, device: WorkerDevice, trial: optuna.Trial) -> TrialReport:
        x = trial.suggest_int("seed", 0, 9)
        size = sizes[x]
        if not ctx.admission.pool.fits_empty(local.reservation(size)):
            return finish(ctx, trial, outcomes.PREDICTED_OOM, "too big")
        lease = ctx.admission.acquire(size, ctx.stop.stop)
        with lock:
            log.append(("in", trial.number, lease.bytes))
        time.sleep(0.15 + 0.05 * (x % 3))
        with lock:
            log.append(("out", trial.number, lease.bytes))
        ctx.admission.release(lease)
        return finish(ctx, trial, outcomes.COMPLETE, "ok", values=[float(x)])

    return run


def test_worker_threads_pack_trials_exactly_n_trials_none_twice(
    tmp_path: Path, corpus: Path
) -> None:
    spec = read_spec(
        spec_dict("pack", corpus, space={"seed": {"low": 0, "high": 9}}, study={"n_trials": 40})
    )
    storage = st.open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    capacity = 1000
    sizes = {x: 60 * (x + 1) for x in range(10)}
    sizes[9] = 5000  # fits no device: predicted_oom, never admitted
    pool = gpus(capacity)
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp_path,
        launcher=None,
        admission=local.Admission(pool, poll_s=0.01),
    )
    log: list[tuple[str, int, int]] = []
    results = wk.run_threads(
        ctx,
        WorkerDevice("cuda"),
        wk.WorkerOptions(n_trials=40),
        8,
        wk.StopFlags(),
        None,
        None,
        False,
        fake_trial(log, threading.Lock(), sizes),
    )
    assert [r.error for r in results] == [None] * 8
    held = 0
    for kind, _, size in log:
        held += size if kind == "in" else -size
        assert held <= capacity
    assert held == 0
    ran = [n for kind, n, _ in log if kind == "in"]
    assert len(ran) == len(set(ran))  # no trial ran twice
    trials = study.get_trials()
    state = wk.budget_state(trials, 40)
    assert state.done and state.finished == 40 and len(trials) == 40
    oom = {t.number for t in trials if t.user_attrs["outcome"] == outcomes.PREDICTED_OOM}
    assert oom == {t.number for t in trials if t.params["seed"] == 9} and not oom & set(ran)
    assert _max_overlap(log) >= 2  # small trials really ran side by side


def _max_overlap(log: list[tuple[str, int, int]]) -> int:
    now = top = 0
    for kind, _, _ in log:
        now += 1 if kind == "in" else -1
        top = max(top, now)
    return top


# --- real children on the CPU --------------------------------------------------------------------


@pytest.mark.study
def test_a_real_sweep_packs_small_trials_and_runs_a_big_one_alone(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = spec_dict(
        "real",
        corpus,
        fixed={"tokenizer": "word", "lr": 3e-2, "max_tokens": 8192},
        space={
            "vocab_size": {"choices": [300, 600]},
            "batch_size": {"choices": [8, 256]},
            "seed": {"choices": [0, 1]},
        },
        study={"n_trials": 4},
        limits={"collapse": False, "memory_budget": "auto"},
        # Two small trials of one configuration, told apart by their seed (the same
        # point twice would be a copy of the first, never trained).
        enqueue=[
            {"vocab_size": 300, "batch_size": 8, "seed": 0},
            {"vocab_size": 600, "batch_size": 8, "seed": 0},
            {"vocab_size": 300, "batch_size": 256, "seed": 0},
            {"vocab_size": 600, "batch_size": 8, "seed": 1},
        ],
    )
    spec = read_spec(data)
    from lm.tokens import load_tokens

    for vocab in (300, 600):  # warm: a cold cache read while a child writes it is another bug
        load_tokens(corpus, "word", vocab)
    small = preflight.predict(
        trial_config(spec, {"vocab_size": 600, "batch_size": 8, "seed": 0}), device="cpu"
    )[0]
    big = preflight.predict(
        trial_config(spec, {"vocab_size": 300, "batch_size": 256, "seed": 0}), device="cpu"
    )[0]
    # Room for two small trials, or the big one alone.
    room = 2 * local.reservation(small) + (local.reservation(big) - local.reservation(small)) // 2
    assert local.reservation(big) + local.reservation(small) > room >= local.reservation(big)
    pool = local.MemoryPool([local.PoolDevice("cpu", "cpu", room, {}, (0, 1), 1)])
    storage = st.open_storage(
        f"sqlite:///{tmp_path / 'db.sqlite'}", heartbeat_interval=1, grace_period=5
    )
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    options = wk.RunOptions(n_workers=None, launcher="fork", poll_s=0.05)
    results = wk.run_workers(spec, storage, study, tmp_path / "runs", options, pool=pool)
    assert len(results) == 2 and [r.error for r in results] == [None, None]
    trials = study.get_trials()
    assert [t.user_attrs["outcome"] for t in trials] == ["complete"] * 4, [
        t.user_attrs.get("reason") for t in trials
    ]
    # From admission to the end (the reservation is released after the trial is told).
    spans = {
        t.number: (
            t.user_attrs["admitted_at"],
            t.datetime_complete.timestamp(),
            t.user_attrs["reserved_mem_bytes"],
            t.user_attrs["placed_on"],
        )
        for t in trials
    }
    assert {s[3] for s in spans.values()} <= {"cpu 0", "cpu 1"}
    overlapped = False
    # Whenever two trials overlapped, their reservations fit the pool together.
    for a in spans.values():
        for b in spans.values():
            if a is not b and a[0] < b[1] and b[0] < a[1]:
                assert a[2] + b[2] <= room
                overlapped = True
    assert overlapped  # the small ones did run side by side
    assert study.user_attrs["memory_budget_bytes"] == local.trial_budget(spec.limits, pool)


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.slow
def test_cap_options_disagreeing_and_address_without_ray_are_one_line(
    tmp_path: Path, corpus: Path
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(toml_text(spec_dict("cli", corpus)))
    both = sweeps_run("run", str(spec), "--workers", "2", "--max-concurrent", "3", cwd=tmp_path)
    assert both.returncode == 2 and "disagree" in both.stderr
    assert len(both.stderr.strip().splitlines()) == 1
    addr = sweeps_run("run", str(spec), "--address", "auto", cwd=tmp_path)
    assert addr.returncode == 2 and "--engine ray" in addr.stderr
    dry = sweeps_run("run", str(spec), "--max-concurrent", "2", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr


def test_suggest_is_idempotent_for_a_node_that_reruns_a_planned_trial(
    tmp_path: Path, corpus: Path
) -> None:
    """The Ray engine plans a trial where it asks it and runs it on a node, where the runner
    suggests again: the same values."""
    spec = read_spec(spec_dict("idem", corpus))
    storage = st.open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    trial = study.ask()
    first = suggest(trial, spec)
    again = suggest(optuna.trial.Trial(study, trial._trial_id), spec)
    assert first == again


def test_a_gpus_pool_is_what_is_free_on_it() -> None:
    """Another process holds 30 GiB of GPU 1 (nvidia-smi's free figure): its pool is 90 % of
    the 50 GiB left, not of the 80 GiB it has."""
    from lm import host

    spec = read_spec(spec_dict("pool", Path("/c"), fixed={"device": "auto"}), check_paths=False)
    free = [host.parse_gpu_memory(line).free for line in ("81050, 81920", "51200, 81920")]
    pool = local.host_pool(spec, gpus=["0", "1"], gpu_free=free)
    assert [d.capacity for d in pool.devices] == [int(free[0] * 0.9), int(50 * 2**30 * 0.9)]
    assert [d.env for d in pool.devices] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    pinned = read_spec(spec_dict("pool", Path("/c"), fixed={"device": "cuda:1"}), check_paths=False)
    assert local.host_pool(pinned, gpus=["0", "1"], gpu_free=free).largest == int(50 * 2**30 * 0.9)


def test_a_trials_child_gets_pci_device_order_and_its_devices_env() -> None:
    from sweeps.runner import child_env

    gpu = WorkerDevice("cuda", {"CUDA_VISIBLE_DEVICES": "3"}, None, "gpu 3")
    assert child_env(gpu) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3"}


def test_sweeps_run_says_what_packing_on_a_gpu_buys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lm import host

    gpu = local.MemoryPool([local.PoolDevice("gpu 0", "cuda", 70 * 2**30)])
    cpu = local.MemoryPool([local.PoolDevice("cpu", "cpu", 2**30, {}, (0, 1), 1)])
    monkeypatch.setenv(host.MPS_PIPE_ENV, str(tmp_path))
    assert local.gpu_sharing_note(cpu) is None
    note = local.gpu_sharing_note(gpu)
    assert note is not None and note.startswith("MPS is not running") and "take turns" in note
    (tmp_path / "control").touch()
    assert local.gpu_sharing_note(gpu).startswith(f"MPS is running ({tmp_path})")
