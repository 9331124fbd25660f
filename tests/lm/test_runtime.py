"""lm.runtime on the CPU: which errors are an out-of-memory, from the messages CUDA runs print."""

from __future__ import annotations

import pytest
import torch

from lm.runtime import is_oom

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
