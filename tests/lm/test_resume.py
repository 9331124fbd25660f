"""Resume checkpoints: a run killed (SIGKILL or SIGTERM) after its first checkpoint and run again
ends with the same weights and the same metrics as one that was never interrupted, bit for bit;
a checkpoint of another configuration is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from lm.config import TrainConfig
from lm.errors import SweepsError
from lm.outcomes import EXIT_CODES
from lm.run_files import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    RESUME_FILE,
    RESUME_INDEX_FILE,
    keep_metrics_until,
    read_result,
    read_resume_index,
    write_config,
)
from lm.train import main, run

REPO = Path(__file__).resolve().parents[2]
#: Measurements of the process, not of the computation: they differ between any two runs.
TIMING_KEYS = {"tokens_per_s", "elapsed_s", "peak_mem_bytes", "wall_s", "resumed_from_tokens"}
#: One thread: the same reductions in the same order in every process.
ENV = {**os.environ, "SWEEPS_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs in this process too (two threads on a busy machine are slower than one)."""
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")


def config(corpus: Path, **overrides: Any) -> TrainConfig:
    """200 steps of 256 tokens (two micro-batches), an evaluation every 5 steps and a checkpoint
    every 20; dropout, so the torch generator's state matters too."""
    values: dict[str, Any] = {
        "corpus": str(corpus),
        "tokenizer": "word",
        "vocab_size": 300,
        "device": "cpu",
        "d_model": 16,
        "n_layers": 1,
        "n_heads": 2,
        "d_ff": 32,
        "seq_len": 16,
        "dropout": 0.1,
        "batch_size": 8,
        "grad_accum": 2,
        "lr": 1e-2,
        "warmup_tokens": 2_000,
        "max_tokens": 51_200,
        "eval_every_tokens": 1_280,
        "eval_tokens": 512,
        "sample_tokens": 4,
        "checkpoint_every_tokens": 5_120,
    }
    return TrainConfig.from_dict({**values, **overrides})


def child(run_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lm.train", str(run_dir)],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def train_child(run_dir: Path, cfg: TrainConfig) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(run_dir, cfg)
    proc = child(run_dir)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


def rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / METRICS_FILE).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def computed(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in TIMING_KEYS}


def past_a_checkpoint(run_dir: Path) -> bool:
    """A checkpoint is written and an evaluation after it too (so resuming must drop a row)."""
    index = read_resume_index(run_dir)
    try:
        written = rows(run_dir)
    except (OSError, json.JSONDecodeError):
        return False
    return index is not None and any(r["tokens"] > index["tokens"] for r in written)


@pytest.fixture(scope="module")
def reference(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same configuration, never interrupted."""
    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    train_child(run_dir, config(corpus))
    return run_dir


def assert_same_run(resumed: Path, reference: Path) -> None:
    ours, theirs = rows(resumed), rows(reference)
    assert [r["tokens"] for r in ours] == [r["tokens"] for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert computed(a) == computed(b)  # every loss, bpb, statistic and sample, exactly
    best, best_ref = (
        torch.load(d / CHECKPOINT_FILE, weights_only=True) for d in (resumed, reference)
    )
    assert best["tokens"] == best_ref["tokens"] and best["val_bpb"] == best_ref["val_bpb"]
    assert best["state_dict"].keys() == best_ref["state_dict"].keys()
    for name, tensor in best["state_dict"].items():
        assert torch.equal(tensor, best_ref["state_dict"][name]), name
    result, result_ref = read_result(resumed), read_result(reference)
    assert result.outcome == result_ref.outcome == "complete"
    for key in ("tokens_seen", "steps", "n_evals", "best_val_bpb", "best_tokens", "fingerprint"):
        assert getattr(result, key) == getattr(result_ref, key), key
    assert computed(result.final_metrics or {}) == computed(result_ref.final_metrics or {})


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.study
def test_interrupted_and_resumed_equals_uninterrupted(
    corpus: Path, tmp_path: Path, reference: Path, sig: int
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, config(corpus))
    proc = child(run_dir)
    try:
        deadline = time.monotonic() + 120
        while (
            not past_a_checkpoint(run_dir) and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    # It was stopped mid-run, not at its end (a SIGTERM ends it as interrupted).
    assert proc.returncode in (-signal.SIGKILL, EXIT_CODES["interrupted"]), proc.returncode
    index = read_resume_index(run_dir)
    assert index is not None and 0 < index["tokens"] < 51_200
    assert max(r["tokens"] for r in rows(run_dir)) > index["tokens"]

    proc = child(run_dir)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert read_result(run_dir).resumed_from_tokens == index["tokens"]
    assert read_result(reference).resumed_from_tokens == 0
    assert_same_run(run_dir, reference)
    # Complete: nothing is left to resume.
    assert not (run_dir / RESUME_FILE).exists() and not (run_dir / RESUME_INDEX_FILE).exists()


def interrupted_run(run_dir: Path, cfg: TrainConfig) -> None:
    """``cfg`` trained in this process until just past its first checkpoint, then Ctrl-C."""

    def stop(tokens: int, _: int) -> None:
        if tokens > 6_000:
            raise KeyboardInterrupt

    assert run(cfg, run_dir, progress=stop).outcome == "interrupted"


@pytest.mark.study
def test_a_checkpoint_of_another_configuration_is_refused(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(corpus, max_tokens=12_800)
    run_dir = tmp_path / "run"
    interrupted_run(run_dir, cfg)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert read_resume_index(run_dir) == {
        "resume_fingerprint": cfg.resume_fingerprint(),
        "tokens": 5_120,
    }
    other = dataclasses.replace(cfg, lr=2e-2)
    with pytest.raises(SweepsError, match=r"another configuration \(lr=0.01 there, 0.02 here\)"):
        run(other, run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before  # nothing written
    # The child's entry: one line, exit 2.
    write_config(run_dir, other)
    assert main([str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "delete it to train this one" in err

    # Where and how long it runs is not what it computes: a new device string, memory limit,
    # wall-clock limit or checkpoint interval continues it.
    placed = dataclasses.replace(
        cfg,
        device="auto",
        cpu_memory_limit_bytes=2**32,
        max_wall_s=600.0,
        checkpoint_every_tokens=None,
    )
    result = run(placed, run_dir)
    assert (result.outcome, result.resumed_from_tokens) == ("complete", 5_120)
    assert result.n_evals == 10 and len(rows(run_dir)) == 10


@pytest.mark.study
def test_no_checkpoint_without_an_interval(corpus: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    interrupted_run(run_dir, config(corpus, max_tokens=7_680, checkpoint_every_tokens=None))
    assert not (run_dir / RESUME_FILE).exists() and read_resume_index(run_dir) is None
    assert run(config(corpus, max_tokens=7_680), run_dir).resumed_from_tokens == 0


def test_keep_metrics_until_drops_later_and_torn_lines(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    lines = [json.dumps({"tokens": t, "val_bpb": 1.0}) for t in (100, 200, 300)]
    (src / METRICS_FILE).write_text("\n".join(lines) + '\n{"tokens": 4', encoding="utf-8")
    assert keep_metrics_until(src, 200, dst) == 2
    assert (dst / METRICS_FILE).read_text(encoding="utf-8") == "\n".join(lines[:2]) + "\n"
    assert keep_metrics_until(src, 10_000) == 3  # the torn last line goes
    assert rows(src) == [json.loads(line) for line in lines]
