"""sweeps.preflight: fits or not, fitting the micro-batch, budgets, calibration, the child limit."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from lm import host, memory
from lm.config import TrainConfig
from lm.errors import SweepsError
from lm.tokens import CorpusCounts
from sweeps import preflight
from sweeps.spec import Limits
from sweeps.spec.limits import MemoryBudget


def cfg_of(**kw: object) -> TrainConfig:
    values: dict[str, object] = {
        "corpus": "/nonexistent-corpus",
        "tokenizer": "word",
        "vocab_size": 300,
        "d_model": 200,
        "n_layers": 1,
        "n_heads": 4,
        "d_ff": 800,
        "seq_len": 254,
        "batch_size": 1000,
        "device": "cpu",
    }
    values.update(kw)
    return TrainConfig.from_dict(values)


def raw(cfg: TrainConfig) -> int:
    return memory.estimate(cfg, "cpu").total


def test_no_budget_or_room_to_spare_fits_unchanged() -> None:
    cfg = cfg_of()
    plan = preflight.plan_trial(cfg, Limits(), device="cpu", budget_bytes=None)
    assert plan.fits and plan.cfg is cfg and plan.fitted is None and plan.budget_bytes is None
    assert plan.predicted_bytes == plan.predicted_raw_bytes == raw(cfg)
    plan = preflight.plan_trial(cfg, Limits(), device="cpu", budget_bytes=64 * 2**30)
    assert plan.fits and plan.cfg is cfg and "<= budget" in plan.reason


def test_prune_policy_reports_what_does_not_fit() -> None:
    cfg = cfg_of()
    plan = preflight.plan_trial(
        cfg, Limits(oom_policy="prune"), device="cpu", budget_bytes=2 * 2**30
    )
    assert not plan.fits and plan.cfg is cfg and plan.fitted is None
    assert plan.budget_bytes == 2 * 2**30 and plan.predicted_bytes > plan.budget_bytes
    assert "predicted" in plan.reason and "budget" in plan.reason


def test_fit_policy_halves_the_micro_batch_and_keeps_the_effective_batch() -> None:
    cfg = cfg_of(grad_accum=2)
    budget = 2 * 2**30
    plan = preflight.plan_trial(cfg, Limits(oom_policy="fit"), device="cpu", budget_bytes=budget)
    assert plan.fits and plan.predicted_bytes <= budget
    assert plan.fitted == {"batch_size": plan.cfg.batch_size, "grad_accum": plan.cfg.grad_accum}
    assert plan.cfg.batch_size * plan.cfg.grad_accum == 2000
    assert plan.cfg.batch_size < 1000
    # The largest micro-batch that fits: the next larger one (x 2) would not.
    bigger = TrainConfig.from_dict(
        {
            **plan.cfg.to_dict(),
            "batch_size": plan.cfg.batch_size * 2,
            "grad_accum": plan.cfg.grad_accum // 2,
        }
    )
    assert raw(bigger) > budget
    assert "same effective batch" in plan.reason


def test_fit_policy_gives_up_at_batch_size_one() -> None:
    plan = preflight.plan_trial(
        cfg_of(batch_size=8), Limits(oom_policy="fit"), device="cpu", budget_bytes=100 * 2**20
    )  # below the process's own baseline
    assert not plan.fits and plan.fitted is None and "even at batch_size 1" in plan.reason


def test_calibration_scales_the_prediction() -> None:
    cfg = cfg_of(batch_size=10)
    plan = preflight.plan_trial(cfg, Limits(), device="cpu", budget_bytes=None, calibration=1.5)
    assert plan.predicted_raw_bytes == raw(cfg)
    assert plan.predicted_bytes == round(1.5 * raw(cfg))
    assert plan.calibration == 1.5
    # A factor can turn "fits" into "does not fit".
    budget = int(1.2 * raw(cfg))
    assert preflight.plan_trial(cfg, Limits(), device="cpu", budget_bytes=budget).fits
    assert not preflight.plan_trial(
        cfg, Limits(), device="cpu", budget_bytes=budget, calibration=1.5
    ).fits


def test_the_corpus_counts_reach_the_estimate(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "word-300"
    cache.mkdir(parents=True)
    (cache / "meta.json").write_text(json.dumps({"train_tokens": 10**6, "val_tokens": 300}))
    cfg = cfg_of(corpus=str(tmp_path))
    counts = CorpusCounts(train_tokens=10**6, val_tokens=300)
    assert (
        preflight.predict(cfg, device="cpu")[1] == memory.estimate(cfg, "cpu", counts=counts).total
    )
    assert memory.estimate(cfg, "cpu", counts=counts).total != raw(cfg)  # the counts matter


def test_launcher_and_device_reach_the_estimate() -> None:
    cfg = cfg_of(batch_size=10)
    fork = preflight.plan_trial(cfg, Limits(), device="cpu", budget_bytes=None, launcher="fork")
    assert fork.predicted_raw_bytes == memory.estimate(cfg, "cpu", launcher="fork").total
    cuda = preflight.plan_trial(cfg, Limits(), device="cuda:0", budget_bytes=None)
    assert cuda.predicted_raw_bytes == memory.estimate(cfg, "cuda").total
    with pytest.raises(SweepsError, match="device"):
        preflight.plan_trial(cfg, Limits(), device="tpu", budget_bytes=None)


@pytest.mark.parametrize(
    ("batch", "accum", "want"),
    [
        (16, 1, (8, 2)),
        (16, 3, (8, 6)),
        (15, 1, (5, 3)),
        (7, 2, (1, 14)),
        (2, 5, (1, 10)),
    ],
)
def test_halve_batch(batch: int, accum: int, want: tuple[int, int]) -> None:
    out = preflight.halve_batch(cfg_of(batch_size=batch, grad_accum=accum))
    assert out is not None
    assert (out.batch_size, out.grad_accum) == want
    assert out.batch_size * out.grad_accum == batch * accum


def test_halve_batch_stops_at_one() -> None:
    assert preflight.halve_batch(cfg_of(batch_size=1, grad_accum=4)) is None


def test_the_memory_budget_has_one_meaning() -> None:
    """A trial's budget is what one trial may have on an empty device (``room``): auto is the
    room, a size is itself lowered to the room, None is no budget; without a known room a size
    stands and auto is left to where the trials run."""
    room = 5 * 2**30
    assert MemoryBudget(None).per_trial(room) is None
    assert MemoryBudget("auto").per_trial(room) == room
    assert MemoryBudget("auto").per_trial(None) is None
    assert MemoryBudget("2GiB").per_trial(room) == 2 * 2**30
    assert MemoryBudget("8GiB").per_trial(room) == room  # the device cannot give more
    assert MemoryBudget("8GiB").per_trial(None) == 8 * 2**30
    assert Limits(memory_budget="2GiB").budget == MemoryBudget(2 * 2**30)
    with pytest.raises(SweepsError, match="memory_budget"):
        MemoryBudget("8 gigs")


def test_a_budget_on_this_hosts_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweeps estimate``'s budget: auto is the room of a trial on this host's device (shared
    by ``--workers`` trials), the same room the pools give; a size is as given."""
    from sweeps import admission

    assert admission.device_budget(MemoryBudget(None), "cpu") is None
    assert admission.device_budget(MemoryBudget(3 * 2**30), "cuda", 4) == 3 * 2**30
    monkeypatch.setattr(host, "mem_available_bytes", lambda: 10 * 2**30)
    auto = MemoryBudget("auto")
    cpu = int(10 * 2**30 * preflight.AUTO_CPU_FRACTION)  # 80 % of MemAvailable
    assert admission.device_budget(auto, "cpu") == admission.trial_room(cpu)
    assert admission.device_budget(auto, "cpu", 4) == admission.trial_room(cpu // 4)
    # Recorded nvidia-smi lines: another process holds 20 GiB of the 80 GiB GPU.
    monkeypatch.setattr(host, "visible_gpus", lambda: ["0", "1"])
    monkeypatch.setattr(host, "gpu_memory", lambda gpu: host.parse_gpu_memory("61440, 81920\n"))
    gpu = preflight.gpu_room(60 * 2**30)  # 90 % of what is free
    assert admission.device_budget(auto, "cuda:1", 2) == admission.trial_room(gpu // 2)
    # The room is the largest prediction whose reservation (prediction + margin) fits.
    for capacity in (gpu, cpu, 1000, 11):
        room = admission.trial_room(capacity)
        assert admission.reservation(room) <= capacity < admission.reservation(room + 1)


def test_mem_available_reads_proc_meminfo() -> None:
    n = host.mem_available_bytes()
    assert 64 * 2**20 < n < 2**50


def _study(rows: list[tuple[optuna.trial.TrialState, dict]]) -> optuna.Study:
    study = optuna.create_study()
    for state, attrs in rows:
        values = [1.0] if state == optuna.trial.TrialState.COMPLETE else None
        study.add_trial(optuna.trial.create_trial(state=state, values=values, user_attrs=attrs))
    return study


def test_calibration_factor_is_the_median_of_finished_trials_once_three() -> None:
    complete, pruned = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED
    failed = optuna.trial.TrialState.FAIL

    def attrs(measured: int, predicted: int, outcome: str = "complete") -> dict:
        return {
            "outcome": outcome,
            "peak_mem_bytes": measured,
            "predicted_mem_raw_bytes": predicted,
        }

    rows = [(complete, attrs(110, 100)), (pruned, attrs(130, 100, "pruned"))]
    assert preflight.calibration_factor(_study(rows)) == 1.0  # only two so far
    rows += [
        (failed, attrs(500, 100, "crashed")),  # not finished
        (pruned, attrs(10, 100, "oom")),  # stopped at its limit: not what it needed
        (pruned, {"outcome": "predicted_oom", "predicted_mem_raw_bytes": 100}),
        (complete, {"outcome": "complete"}),  # nothing measured
    ]
    assert preflight.calibration_factor(_study(rows)) == 1.0
    rows.append((complete, attrs(90, 100)))
    assert preflight.calibration_factor(_study(rows)) == pytest.approx(1.1)
    assert preflight.calibration_ratios(_study(rows)) == pytest.approx([1.1, 1.3, 0.9])
    # Clamped: a wild factor means the estimator is wrong here, not that memory is 10x.
    wild = [(complete, attrs(1000, 100))] * 3
    assert preflight.calibration_factor(_study(wild)) == preflight.CALIBRATION_MAX
    tiny = [(complete, attrs(10, 100))] * 3
    assert preflight.calibration_factor(_study(tiny)) == preflight.CALIBRATION_MIN


def test_cpu_child_limit() -> None:
    base = memory.CPU_BASELINE_BYTES - memory.CPU_FORK_SAVING_BYTES
    gib = 2**30
    # A roomy budget: everything beyond the child's start-up footprint.
    assert preflight.cpu_child_limit(8 * gib, 1 * gib) == 8 * gib - base
    # A prediction at the budget: the predicted growth plus headroom, never less.
    limit = preflight.cpu_child_limit(2 * gib, 2 * gib)
    assert limit >= (2 * gib - base) * 1.4
    assert limit > 2 * gib - base
    # Never zero or negative, even for a budget below the baseline.
    assert preflight.cpu_child_limit(10 * 2**20, 10 * 2**20) >= 64 * 2**20


# --- CUDA: calibration learns the tensors, the context is added after ---------------------------

MIB = 2**20
#: A CUDA trial as its child records it: max_memory_allocated (tensors), max_memory_reserved
#: (the caching allocator's blocks) and the context the driver holds beyond them (nvidia-smi's
#: per-process figure less reserved), for small GPT trials of the kind a sweep packs. The
#: allocated figures sit within the estimator's 10 % target of its tensor prediction; the
#: context is ~500 MiB whatever the model.
CUDA_RUNS = (  # (d_model, batch_size, allocated / predicted allocated, reserved / allocated)
    (64, 16, 0.92, 1.09),
    (128, 32, 1.07, 1.06),
    (256, 64, 1.10, 1.04),
)
CUDA_CONTEXT = 500 * MIB


def cuda_cfg(d_model: int, batch_size: int) -> TrainConfig:
    return cfg_of(
        device="cuda",
        d_model=d_model,
        d_ff=4 * d_model,
        n_layers=2,
        seq_len=128,
        batch_size=batch_size,
        vocab_size=4096,
        tokenizer="bpe",
        precision="bf16",
    )


def cuda_record(plan: preflight.TrialPlan, allocated: int) -> dict:
    """The trial record the runner writes for a finished CUDA trial (its own functions)."""
    from sweeps.attempt_record import peak_measured

    result = {
        "peak_mem_bytes": allocated,
        "peak_mem_kind": memory.PEAK_CUDA_ALLOCATED,
        "device": "cuda:0",
    }
    peak, kind = peak_measured(result, {}, 3 * 2**30, "cuda")  # the host RSS is ignored
    return {
        "outcome": "complete",
        "peak_mem_bytes": peak,
        "peak_mem_kind": kind,
        "predicted_mem_raw_bytes": plan.predicted_raw_bytes,
        "predicted_peak_mem_raw_bytes": plan.predicted_measured_raw_bytes,
        "predicted_peak_mem_kind": plan.measured_kind,
    }


def test_cuda_calibration_compares_tensors_with_tensors() -> None:
    cfg = cuda_cfg(64, 16)
    plan = preflight.plan_trial(cfg, Limits(), device="cuda", budget_bytes=None)
    est = memory.estimate(cfg, "cuda")
    assert plan.measured_kind == memory.PEAK_CUDA_ALLOCATED
    assert plan.predicted_measured_raw_bytes == est.allocated < est.total
    complete = optuna.trial.TrialState.COMPLETE
    record = cuda_record(plan, int(est.allocated * 0.9))
    assert preflight.calibration_ratios(_study([(complete, record)])) == pytest.approx([0.9])
    # A peak the parent polled (host RSS) is not device memory: never against a CUDA plan.
    host_rss = {**record, "peak_mem_kind": memory.PEAK_HOST_RSS}
    assert preflight.calibration_ratios(_study([(complete, host_rss)])) == []


def test_the_cuda_factor_scales_the_tensors_only() -> None:
    est = memory.estimate(cuda_cfg(64, 16), "cuda")
    assert est.calibrated(1.0) == est.total
    context = memory.CUDA_CONTEXT_BYTES
    # Half the tensors: the context and workspace stay whole.
    assert est.calibrated(0.5) > context + memory.CUDA_WORKSPACE_BYTES
    assert est.calibrated(0.5) > est.total * 0.5 + context / 2
    # The CPU's whole is what its measurement is: scaled whole.
    cpu = memory.estimate(cfg_of(), "cpu")
    assert cpu.calibrated(1.3) == round(cpu.total * 1.3)


def test_a_three_trial_cuda_study_reserves_at_least_each_real_peak() -> None:
    """Acceptance: three finished CUDA trials (recorded numbers) calibrate the study; every
    trial planned after it reserves at least what it really holds on the device (reserved
    blocks + its context). Before the fix the factor (allocated / whole prediction) was
    clamped at 0.5 and scaled the context too: reservations fell below the real peaks."""
    from sweeps.admission import reservation

    complete = optuna.trial.TrialState.COMPLETE
    rows, real_peaks, cfgs = [], [], []
    for d_model, batch, tensor_error, reserved_share in CUDA_RUNS:
        cfg = cuda_cfg(d_model, batch)
        plan = preflight.plan_trial(cfg, Limits(), device="cuda", budget_bytes=None)
        allocated = int(plan.predicted_measured_raw_bytes * tensor_error)
        rows.append((complete, cuda_record(plan, allocated)))
        real_peaks.append(int(allocated * reserved_share) + CUDA_CONTEXT)
        cfgs.append(cfg)
    factor = preflight.calibration_factor(_study(rows))
    assert factor == pytest.approx(1.07, abs=0.01)
    for cfg, real in zip(cfgs, real_peaks, strict=True):
        plan = preflight.plan_trial(
            cfg, Limits(), device="cuda", budget_bytes=None, calibration=factor
        )
        assert reservation(plan.predicted_bytes) >= real, (cfg.d_model, plan.predicted_bytes, real)
