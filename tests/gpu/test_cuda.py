"""What only a CUDA device can show (marker ``gpu``; skipped with the reason without CUDA; run by
``tests/gpu/run.sh`` on a GPU host):

- mixed precision: one training step under bf16 autocast and under fp16 autocast with
  ``GradScaler`` gives the fp32 loss and gradients within stated tolerances, and a short
  ``lm.train.run`` of each ends at the fp32 validation loss within 3 %;
- a CUDA out-of-memory ends the trial ``oom`` with a complete ``result.json`` (every field the
  parent reads, valid), and the next trial on the same GPU, forked from the same server,
  completes; in one process too (``lm.train`` frees the memory of the run that failed: what
  the caching allocator holds after it is a few MiB, not the failed run's tensors);
- the fork server imports torch but does not initialize CUDA (no ``libcuda`` mapped in it), so
  the children it forks train on CUDA;
- ``CUDA_VISIBLE_DEVICES`` as a worker sets it pins a child to one device;
- a run limited to its reservation (``cuda_memory_limit_bytes``, as the runner sets it) that
  outgrows it ends ``oom`` itself, naming the limit, and one within it completes under it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from lm import host
from lm.config import TrainConfig
from lm.corpus import prepare_synthetic
from lm.model import GPT
from lm.run_files import RunResult, check_result, read_result
from lm.runtime import autocast_for
from lm.tokens import load_tokens
from lm.train import lm_loss, run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (torch.cuda.is_available() is False)",
    ),
]

#: |loss / fp32 loss - 1| after one step from the same weights and batch. fp16 keeps 10 mantissa
#: bits to bf16's 7, hence the tighter bound.
LOSS_TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3}
#: Cosine similarity of all gradients (flattened) to fp32's, at least.
GRAD_COSINE = 0.99
#: |final val_loss / fp32's - 1| after a short run of each precision from the same seed.
RUN_TOLERANCE = 0.03

SMALL: dict[str, Any] = {
    "tokenizer": "bpe",
    "vocab_size": 1024,
    "d_model": 128,
    "n_layers": 2,
    "n_heads": 4,
    "d_ff": 512,
    "seq_len": 128,
    "batch_size": 16,
    "lr": 3e-3,
    "device": "cuda",
    "max_tokens": 40 * 16 * 128,
    "warmup_tokens": 5 * 16 * 128,
    "eval_every_tokens": 20 * 16 * 128,
    "eval_tokens": 8 * 128,
    "sample_tokens": 4,
}


@pytest.fixture(scope="module")
def gpu_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 MB with the BPE-1024 and byte caches (bigger models than the CPU tests train)."""
    out = tmp_path_factory.mktemp("gpu") / "corpus-1MB"
    prepare_synthetic(out, size_bytes=1_000_000, seed=0)
    for kind, size in (("bpe", 1024), ("byte", 260)):
        load_tokens(out, kind, size)
    return out


def config(corpus: Path, **overrides: Any) -> TrainConfig:
    return TrainConfig.from_dict({"corpus": str(corpus), **SMALL, **overrides})


def write_run(run_dir: Path, cfg: TrainConfig) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()), encoding="utf-8")
    return run_dir


def one_step(model: GPT, batch: torch.Tensor, precision: str) -> tuple[float, torch.Tensor]:
    """The loss and the true (unscaled) gradients, flattened, of one step from ``model``."""
    device = batch.device
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    with autocast_for(device, precision)():
        loss = lm_loss(model, batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return float(loss.detach()), grads


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_one_step_matches_fp32(gpu_corpus: Path, precision: str) -> None:
    cfg = config(gpu_corpus)
    torch.manual_seed(0)
    reference = GPT(cfg.model_config()).cuda()
    ids = torch.from_numpy(load_tokens(gpu_corpus, "bpe", 1024).train[: 16 * 129].astype("int64"))
    batch = ids.view(16, 129).cuda()  # (B, T + 1)
    loss32, grads32 = one_step(copy.deepcopy(reference), batch, "fp32")
    loss, grads = one_step(copy.deepcopy(reference), batch, precision)
    assert abs(loss / loss32 - 1) < LOSS_TOLERANCE[precision], (loss, loss32)
    cosine = float(torch.nn.functional.cosine_similarity(grads, grads32, dim=0))
    assert cosine > GRAD_COSINE, cosine


def test_short_runs_match_fp32(gpu_corpus: Path, tmp_path: Path) -> None:
    val = {}
    for precision in ("fp32", "bf16", "fp16"):
        result = run(config(gpu_corpus, precision=precision), tmp_path / precision)
        assert result.outcome == "complete", result.reason
        val[precision] = result.final_metrics["val_loss"]
    for precision in ("bf16", "fp16"):
        assert abs(val[precision] / val["fp32"] - 1) < RUN_TOLERANCE, val


def huge(gpu_corpus: Path) -> TrainConfig:
    """A batch far beyond any GPU: one (B, T, C) activation alone is 8192 x 1024 x 2048 x 4 B =
    64 GiB, and the forward keeps several."""
    return config(
        gpu_corpus,
        tokenizer="byte",
        vocab_size=260,
        d_model=2048,
        n_heads=16,
        d_ff=8192,
        seq_len=1024,
        batch_size=8192,
        max_tokens=8192 * 1024,
        warmup_tokens=0,
        eval_every_tokens=10**12,
        eval_tokens=1024,
    )


def assert_complete_oom_result(run_dir: Path) -> None:
    raw = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    checked, problems = check_result(raw)
    assert problems == [] and checked is not None
    assert {f.name for f in dataclasses.fields(RunResult)} <= set(raw)
    result = read_result(run_dir)
    assert result.outcome == "oom", result.reason
    assert "out of memory" in result.reason
    assert result.device.startswith("cuda")


def test_oom_then_the_next_trial_completes_in_one_process(gpu_corpus: Path, tmp_path: Path) -> None:
    result = run(huge(gpu_corpus), tmp_path / "huge")
    assert result.outcome == "oom", result.reason
    assert_complete_oom_result(tmp_path / "huge")
    # The failed run's tensors are gone, not just small enough for the next run to squeeze by:
    # its frames are dropped before release_memory (lm.train.drop_frames) and the cache is
    # emptied. A few MiB stay (the warm-up's cuBLAS workspace, the RNG state).
    assert torch.cuda.memory_allocated() < 64 * 2**20, torch.cuda.memory_summary()
    assert torch.cuda.memory_reserved() < 128 * 2**20, torch.cuda.memory_summary()
    after = run(config(gpu_corpus), tmp_path / "after")
    assert after.outcome == "complete", after.reason


def cuda_mapped(pid: int) -> bool:
    """Whether the driver library is mapped in ``pid``: CUDA was initialized there."""
    return "libcuda.so" in Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")


def test_fork_server_children_train_on_cuda_and_survive_an_oom(
    gpu_corpus: Path, tmp_path: Path
) -> None:
    from sweeps.forkserver import ForkServer

    with ForkServer() as server:
        # The server's own process (private attribute: the test must look inside it).
        assert not cuda_mapped(server._proc.pid), "the fork server initialized CUDA"
        big = write_run(tmp_path / "huge", huge(gpu_corpus))
        child = server.launch(big, log_path=big / "log.txt")
        child.wait(timeout=120)
        assert_complete_oom_result(big)
        for i in range(2):  # the next trials on the same GPU, from the same server
            run_dir = write_run(tmp_path / f"next-{i}", config(gpu_corpus))
            rc = server.launch(run_dir, log_path=run_dir / "log.txt").wait(timeout=120)
            result = read_result(run_dir)
            assert (rc, result.outcome) == (0, "complete"), (run_dir / "log.txt").read_text()
            assert result.device.startswith("cuda") and result.peak_mem_bytes > 0
        assert not cuda_mapped(server._proc.pid)


def test_visible_devices_pins_a_child_to_one_device(gpu_corpus: Path, tmp_path: Path) -> None:
    from sweeps.forkserver import ForkServer

    gpu = host.visible_gpus()[0]  # what the local engine gives a worker: one GPU id
    pinned = {host.VISIBLE_DEVICES_ENV: gpu}
    with ForkServer() as server:
        ok = write_run(tmp_path / "pinned", config(gpu_corpus))
        assert server.launch(ok, log_path=ok / "log.txt", env=pinned).wait(timeout=120) == 0
        assert read_result(ok).outcome == "complete"
        # The pinned child sees exactly one device: a second one is not there for it.
        second = write_run(tmp_path / "second", config(gpu_corpus, device="cuda:1"))
        rc = server.launch(second, log_path=second / "log.txt", env=pinned).wait(timeout=120)
        assert rc != 0
        assert "only 1 CUDA device(s) exist" in (second / "log.txt").read_text()
        # A CPU worker's children get CUDA_VISIBLE_DEVICES="" and see none.
        hidden = write_run(tmp_path / "hidden", config(gpu_corpus))
        rc = server.launch(
            hidden, log_path=hidden / "log.txt", env={host.VISIBLE_DEVICES_ENV: ""}
        ).wait(timeout=120)
        assert rc != 0
        assert "CUDA" in (hidden / "log.txt").read_text()
    assert os.environ.get(host.VISIBLE_DEVICES_ENV) != ""  # the test's own process is untouched


def test_a_run_over_its_cuda_reservation_ends_oom_itself(gpu_corpus: Path, tmp_path: Path) -> None:
    # ~1 GiB of logits and their gradients (512 x 128 x 1024 x 4 B a copy) against 256 MiB
    # left to the allocator once the context is taken from the 768 MiB reservation.
    over = config(gpu_corpus, batch_size=512, cuda_memory_limit_bytes=768 * 2**20)
    result = run(over, tmp_path / "over")
    assert result.outcome == "oom", result.reason
    assert "cuda_memory_limit_bytes=805,306,368" in result.reason
    within = run(config(gpu_corpus, cuda_memory_limit_bytes=2 * 2**30), tmp_path / "within")
    assert within.outcome == "complete", within.reason
    assert within.peak_mem_bytes <= 2 * 2**30 - 512 * 2**20
    # The limit is the run's, not the process's: lifted when the run ends.
    torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
