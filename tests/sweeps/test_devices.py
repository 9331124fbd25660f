"""The one device resolver (``sweeps.devices``): the spec's device against a place's GPUs, with
one set of errors for this host and for the Ray and Slurm clusters' nodes; and the dry run
printing the pools, worker threads and budget the real run takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lm import host
from lm.errors import SweepsError
from sweeps import admission as local
from sweeps import devices, plan
from sweeps import workers as wk
from sweeps.console import human_bytes
from sweeps.engines import ray as ray_engine
from sweeps.engines import slurm
from sweeps.spec import StudySpec, read_spec
from tests.sweeps.helpers import spec_dict, worker_study

GiB = 2**30


def _spec(device: str, corpus: Path = Path("/c"), **kw: Any) -> StudySpec:
    return read_spec(spec_dict("dev", corpus, fixed={"device": device}, **kw), check_paths=False)


# --- the resolver alone --------------------------------------------------------------------------


def test_cpu_reads_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_probe() -> list[str]:
        raise AssertionError("a CPU spec must not ask for the GPUs")

    monkeypatch.setattr(host, "visible_gpus", no_probe)
    assert devices.resolve("cpu") == [devices.CPU]
    assert devices.CPU.env == {host.VISIBLE_DEVICES_ENV: ""}


def test_auto_and_cuda_take_every_gpu_each_trial_seeing_its_own() -> None:
    for wanted in ("auto", "cuda"):
        placed = devices.resolve(wanted, ["0", "3"])
        assert [(d.kind, d.label, d.env, d.index) for d in placed] == [
            ("cuda", "gpu 0", {"CUDA_VISIBLE_DEVICES": "0"}, 0),
            ("cuda", "gpu 3", {"CUDA_VISIBLE_DEVICES": "3"}, 1),
        ]
    assert devices.resolve("auto", []) == [devices.CPU]


def test_a_pinned_gpu_is_that_gpu_alone_seen_as_the_config_names_it() -> None:
    [gpu] = devices.resolve("cuda:1", ["0", "3"])
    assert (gpu.kind, gpu.label, gpu.env, gpu.index) == ("cuda", "gpu 3", {}, 1)


@pytest.mark.parametrize(
    ("wanted", "gpus", "words"),
    [
        (
            "cuda",
            [],
            "asks for device cuda, but no GPU is visible on this host (nvidia-smi / "
            "CUDA_VISIBLE_DEVICES); use device auto or cpu",
        ),
        (
            "cuda:7",
            ["0"],
            "asks for device cuda:7, but this host has 1 visible GPU(s) (nvidia-smi "
            "/ CUDA_VISIBLE_DEVICES); use device auto, cuda or cpu",
        ),
        ("cuda:0", [], "this host has 0 visible GPU(s)"),
    ],
)
def test_a_gpu_the_place_lacks_is_one_line(wanted: str, gpus: list[str], words: str) -> None:
    with pytest.raises(SweepsError) as err:
        devices.resolve(wanted, gpus)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_device_checks_itself() -> None:
    with pytest.raises(ValueError, match="kind must be cpu or cuda"):
        devices.Device("tpu", "tpu 0")
    with pytest.raises(ValueError, match="a cuda device takes a GPU index"):
        devices.Device("cuda", "gpu 0")


def test_the_clusters_use_the_same_rule_on_their_largest_node() -> None:
    cpu_only = [ray_engine.Node("n1", "10.0.0.1", 8, 0, 16 * GiB)]
    two = [*cpu_only, ray_engine.Node("n2", "10.0.0.2", 8, 2, 16 * GiB)]
    assert ray_engine.device_kind(_spec("auto"), cpu_only) == "cpu"
    assert ray_engine.device_kind(_spec("cuda:1"), two) == "cuda"
    with pytest.raises(SweepsError, match="no GPU is visible on any node of the Ray cluster"):
        ray_engine.device_kind(_spec("cuda"), cpu_only)
    with pytest.raises(SweepsError, match="the largest node of the Ray cluster has 2 visible"):
        ray_engine.device_kind(_spec("cuda:2"), two)
    nodes = [slurm.Node("a", 2, 4 * GiB, 0), slurm.Node("b", 8, 64 * GiB, 2)]
    assert slurm.study_kind(_spec("auto"), nodes) == "cuda"
    assert slurm.study_kind(_spec("auto"), nodes[:1]) == "cpu"
    with pytest.raises(SweepsError, match="no GPU is visible on any node of partition 'cpu'"):
        slurm.study_kind(_spec("cuda"), nodes[:1], "cpu")


# --- the dry run prints what the run takes -------------------------------------------------------


def _fake_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GPUs with 10 and 20 GiB free, four cores."""
    monkeypatch.setattr(host, "visible_gpus", lambda: ["0", "1"])
    monkeypatch.setattr(local, "_gpu_free", lambda index: (10, 20)[index] * GiB)
    monkeypatch.setattr(host, "cpu_ids", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(host, "mps_pipe", lambda: None)


def _what_the_run_takes(
    spec: StudySpec, cap: int | None, db: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, int | None]:
    """(the workers line, the per-trial budget) of ``run_workers`` on the fake host, read where
    it starts its threads (nothing is launched)."""
    seen: dict[str, Any] = {}

    def run_threads(ctx: Any, device: Any, options: Any, n_threads: int, *rest: Any) -> list:
        seen["line"] = local.describe(ctx.admission.pool, n_threads)
        seen["budget"] = ctx.budget_bytes
        return []

    monkeypatch.setattr(wk, "run_threads", run_threads)
    storage, study = worker_study(spec, db)
    try:
        wk.run_workers(
            spec,
            storage,
            study,
            db.parent / "runs",
            wk.RunOptions(n_workers=cap),
            launcher=object(),
        )
    finally:
        storage.engine.dispose()
    return seen["line"], seen["budget"]


@pytest.mark.parametrize(("device", "cap"), [("auto", None), ("auto", 3), ("cpu", 2)])
def test_the_dry_run_prints_the_split_the_run_uses(
    device: str, cap: int | None, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_host(monkeypatch)
    spec = _spec(device, corpus, study={"n_trials": 12}, limits={"memory_budget": "auto"})
    rows = dict(plan.dry_run(spec, "sqlite://", cap, None).rows)
    line, budget = _what_the_run_takes(spec, cap, tmp_path / "db.sqlite", monkeypatch)
    assert rows["workers"] == line
    assert rows["memory budget"] == f"{human_bytes(budget)} per trial (auto)"
    if device == "auto":
        assert "on gpu 0, gpu 1" in line
        assert budget == local.trial_budget(spec.limits, local.host_pool(spec, cap))
    else:
        assert "on cpu 0-3 (2 cores a trial)" in line and line.startswith("up to 2 trials")
