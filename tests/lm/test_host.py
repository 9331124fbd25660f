"""lm.host on the CPU, with what GPU hosts print fed in: free GPU memory, threads of a GPU run,
the device order children get."""

from __future__ import annotations

import pytest

from lm import host


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("81050, 81559\n", host.GpuMemory(81050 * 2**20, 81559 * 2**20)),  # idle A100 80GB
        ("120310, 143771\n", host.GpuMemory(120310 * 2**20, 143771 * 2**20)),  # a shared H200
        ("[N/A], [N/A]\n", None),  # a MIG instance
        ("No devices were found\n", None),
        ("1, 2\n3, 4\n", None),  # two GPUs: the query is for one
        ("", None),
    ],
)
def test_nvidia_smis_memory_line(text: str, want: host.GpuMemory | None) -> None:
    assert host.parse_gpu_memory(text) == want


def test_a_gpu_run_gets_few_threads_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "cpu_ids", lambda: list(range(16)))
    monkeypatch.delenv(host.NUM_THREADS_ENV, raising=False)
    assert host.run_threads("cuda") == host.GPU_RUN_THREADS < 16
    assert host.run_threads("cpu") == 16
    monkeypatch.setenv(host.NUM_THREADS_ENV, "4")
    assert host.run_threads("cuda") == host.run_threads("cpu") == 4
    monkeypatch.setattr(host, "cpu_ids", lambda: [0, 1])
    assert host.run_threads("cuda") == 2  # never more than its cores


def test_children_number_gpus_as_nvidia_smi_does() -> None:
    assert host.CHILD_ENV == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_a_running_mps_daemon_is_found_by_its_control_pipe(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(host.MPS_PIPE_ENV, str(tmp_path))
    assert host.mps_pipe() is None  # the directory alone: no daemon listens
    (tmp_path / "control").touch()
    assert host.mps_pipe() == str(tmp_path)
