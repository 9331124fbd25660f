"""lm.runtime on the CPU: which errors are an out-of-memory, from the messages CUDA runs print."""

from __future__ import annotations

import pytest
import torch

from lm import memory, runtime
from lm.runtime import cuda_memory_fraction, is_oom

#: Messages as torch raises them on CUDA hosts (RuntimeError unless noted).
CUDA_OOMS = (
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasLtMatmul( ltHandle, "
    "computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), ...)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "cuFFT error: CUFFT_ALLOC_FAILED",
    "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some "
    "other API call, so the stacktrace below might be incorrect.",
    "CUDA driver error: cudaErrorMemoryAllocation",
    "CUSOLVER_STATUS_ALLOC_FAILED when calling `cusolverDnCreate(handle)`",
    "[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)",
)
NOT_OOMS = (
    "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, "
    "m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
    "CUDA error: device-side assert triggered",
    "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(...)`",
    "mat1 and mat2 shapes cannot be multiplied (4x8 and 16x8)",
)


@pytest.mark.parametrize("message", CUDA_OOMS)
def test_cuda_library_allocation_failures_are_oom(message: str) -> None:
    assert is_oom(RuntimeError(message))


@pytest.mark.parametrize("message", NOT_OOMS)
def test_other_cuda_errors_are_not(message: str) -> None:
    assert not is_oom(RuntimeError(message))
    assert not is_oom(ValueError("out of memory"))  # only RuntimeError carries these


def test_torchs_own_oom_and_memory_error() -> None:
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(MemoryError())


#: An H200 as torch reports it (get_device_properties(0).total_memory).
H200_TOTAL = 150_011_707_392


def test_the_cuda_fraction_is_the_reservation_less_the_context() -> None:
    gib, context = 2**30, memory.CUDA_CONTEXT_BYTES
    assert cuda_memory_fraction(2 * gib, H200_TOTAL, context) == pytest.approx(
        (2 * gib - context) / H200_TOTAL
    )
    # A reservation at or below the context still starts (and ends oom at once); never > 1.
    assert cuda_memory_fraction(context // 2, H200_TOTAL, context) == runtime.MIN_CUDA_FRACTION
    assert cuda_memory_fraction(10 * H200_TOTAL, H200_TOTAL, context) == 1.0


def test_a_limited_cuda_run_sets_its_allocators_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``lm.train`` calls on a CUDA device, with torch's CUDA calls recorded."""
    from types import SimpleNamespace

    calls: list[tuple[float, torch.device]] = []
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=H200_TOTAL)
    )
    monkeypatch.setattr(
        torch.cuda,
        "set_per_process_memory_fraction",
        lambda fraction, device: calls.append((fraction, device)),
    )
    gpu = torch.device("cuda", 0)
    fraction = runtime.cuda_memory_limit(gpu, 4 * 2**30)
    assert calls == [(fraction, gpu)]
    assert fraction * H200_TOTAL + memory.CUDA_CONTEXT_BYTES == pytest.approx(4 * 2**30)
    assert runtime.cuda_memory_limit(gpu, None) is None
    assert runtime.cuda_memory_limit(torch.device("cpu"), 4 * 2**30) is None
    assert len(calls) == 1
    runtime.lift_cuda_memory_limit(gpu)  # the run's end: the whole device again
    assert calls[-1] == (1.0, gpu)
