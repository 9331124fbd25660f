"""Cooldown reads (``lm.cooldown``): a read is the end of a shorter WSD run, and a run ends
the same with or without reads, resumed or not."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from lm import flops
from lm.config import TrainConfig
from lm.run_files import CHECKPOINT_FILE, METRICS_FILE, RESUME_FILE, RunResult
from lm.runtime import RunInterrupted
from lm.train import run

#: Measurements of the process, not of the computation.
TIMING_KEYS = {"tokens_per_s", "elapsed_s", "peak_mem_bytes"}
#: 64 tokens per step; the read at 5,120 tokens decays over 1,280 (20 steps).
READ_AT, SPAN = 5_120, 1_280


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same reductions in the same order in every run."""
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")


def config(corpus: Path, **overrides: Any) -> TrainConfig:
    """200 steps of 64 tokens, WSD, dropout (so torch's generator matters too), reads at 3,000
    (between evaluations) and 5,120 (at one)."""
    values: dict[str, Any] = {
        "corpus": str(corpus),
        "tokenizer": "word",
        "vocab_size": 300,
        "device": "cpu",
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "d_ff": 64,
        "seq_len": 16,
        "dropout": 0.1,
        "batch_size": 4,
        "lr": 1e-2,
        "warmup_tokens": 640,
        "max_tokens": 12_800,
        "eval_every_tokens": 2_560,
        "eval_tokens": 512,
        "sample_tokens": 4,
        "checkpoint_every_tokens": None,
        "lr_schedule": "wsd",
        "cooldown_reads": [3_000, READ_AT],
        "cooldown_fraction": 0.25,
    }
    return TrainConfig.from_dict({**values, **overrides})


def rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / METRICS_FILE).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def computed(row: dict[str, Any], *also: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in TIMING_KEYS | set(also)}


@pytest.fixture(scope="module")
def reading(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult]:
    run_dir = tmp_path_factory.mktemp("runs") / "reading"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWEEPS_NUM_THREADS", "1")
        return run_dir, run(config(corpus), run_dir)


@pytest.mark.study
def test_a_read_is_the_final_evaluation_of_the_wsd_run_that_ends_after_it(
    corpus: Path, tmp_path: Path, reading: tuple[Path, RunResult]
) -> None:
    """A read at p over c tokens equals a WSD run of p + c tokens whose decay is its last c."""
    run_dir, result = reading
    assert result.outcome == "complete"
    read = next(r for r in rows(run_dir) if r.get("read") == "cooldown" and r["tokens"] == READ_AT)
    assert read["cooldown_tokens"] == SPAN and read["step"] == READ_AT // 64
    full_dir = tmp_path / "full"
    full = run(
        config(
            corpus,
            max_tokens=READ_AT + SPAN,
            decay_fraction=SPAN / (READ_AT + SPAN),
            cooldown_reads=[],
        ),
        full_dir,
    )
    final = full.final_metrics or {}
    assert final["tokens"] == READ_AT + SPAN
    assert read["val_loss"] == pytest.approx(final["val_loss"], rel=1e-9, abs=0)
    # Everything else too (the mean training loss of the same 20 steps, the rate of the last
    # one, the samples), but where the line is and what it is.
    skip = ("step", "tokens", "read", "cooldown_tokens")
    assert computed(read, *skip) == computed(final, *skip)


@pytest.mark.study
def test_a_run_ends_the_same_with_or_without_reads(
    corpus: Path, tmp_path: Path, reading: tuple[Path, RunResult]
) -> None:
    run_dir, result = reading
    plain_dir = tmp_path / "plain"
    plain = run(config(corpus, cooldown_reads=[]), plain_dir)
    own = [r for r in rows(run_dir) if "read" not in r]
    reads = [r for r in rows(run_dir) if "read" in r]
    assert [computed(r) for r in own] == [computed(r) for r in rows(plain_dir)]
    assert computed(result.final_metrics or {}) == computed(plain.final_metrics or {})
    for key in ("tokens_seen", "steps", "n_evals", "best_val_bpb", "best_tokens"):
        assert getattr(result, key) == getattr(plain, key), key
    best, best_plain = (
        torch.load(d / CHECKPOINT_FILE, weights_only=True) for d in (run_dir, plain_dir)
    )
    for name, tensor in best["state_dict"].items():
        assert torch.equal(tensor, best_plain["state_dict"][name]), name
    # The reads' cost is counted beside the run's tokens, not in them.
    assert [r["tokens"] for r in reads] == [3_008, READ_AT]  # the step boundaries past them
    assert result.n_reads == 2 and plain.n_reads == 0
    assert (
        result.cooldown_tokens_total == sum(r["cooldown_tokens"] for r in reads) == 768 + SPAN
    )  # 752 rounded up to whole steps, and 1,280
    assert plain.cooldown_tokens_total == 0
    assert flops.planned_reads(config(corpus)) == (2, result.cooldown_tokens_total)


@pytest.mark.study
def test_a_resumed_run_keeps_its_schedule_and_its_reads(
    corpus: Path, tmp_path: Path, reading: tuple[Path, RunResult]
) -> None:
    """Interrupted after the checkpoint that follows the second read, and run again: the same
    lines and result as the run never interrupted; the checkpoint records the schedule."""
    cfg = config(corpus, checkpoint_every_tokens=5_000)
    run_dir = tmp_path / "resumed"

    def interrupt(tokens: int, _total: int) -> None:
        if tokens >= 7_000:
            raise RunInterrupted("SIGTERM")

    assert run(cfg, run_dir, progress=interrupt).outcome == "interrupted"
    ckpt = torch.load(run_dir / RESUME_FILE, weights_only=True)
    assert ckpt["tokens"] == READ_AT and ckpt["n_reads"] == 2
    assert ckpt["schedule"] == {
        "lr_schedule": "wsd",
        "decay_fraction": 0.2,
        "decay_shape": "1-sqrt",
        "cooldown_reads": [3_000, READ_AT],
        "cooldown_fraction": 0.25,
    }
    result = run(cfg, run_dir)
    reference_dir, reference = reading
    assert result.resumed_from_tokens == READ_AT
    assert [computed(r) for r in rows(run_dir)] == [computed(r) for r in rows(reference_dir)]
    assert result.cooldown_tokens_total == reference.cooldown_tokens_total
    assert computed(result.final_metrics or {}) == computed(reference.final_metrics or {})


@pytest.mark.study
def test_a_read_that_diverges_ends_the_run_as_diverged_and_says_where(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lm.schedule.cooldown_lr", lambda *_: math.nan)
    cfg = config(corpus, max_tokens=1_280, cooldown_reads=[640], eval_every_tokens=1_280)
    result = run(cfg, tmp_path / "run")
    assert result.outcome == "diverged"
    assert result.reason == "training loss is nan at step 2 of the cooldown read at 640 tokens"
    assert result.n_reads == 0
