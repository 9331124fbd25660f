"""The training run: objective, gradient accumulation, outcomes, files, determinism, generation.

One small synthetic corpus (built once per module) and tiny 2-layer models on the CPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import lm.step as step_mod
import lm.train as train_mod
from lm import outcomes
from lm.config import ModelConfig, TrainConfig, param_breakdown
from lm.corpus import prepare_synthetic
from lm.errors import SweepsError
from lm.generate import generate
from lm.model import GPT
from lm.run_files import METRIC_KEYS, RunResult, read_result
from lm.schedule import lr_at, lr_sum
from lm.step import accumulate_gradients, lm_loss
from lm.tokens import load_tokens
from lm.train import main, run

REPO = Path(__file__).resolve().parents[2]
RESULT_KEYS = {f for f in RunResult.__dataclass_fields__}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """The runs in this process on one thread, the module's fixtures included: these tiny models
    train fastest on one, and torch's threads spinning against a busy machine (another test
    worker, say) made one 3-second run take minutes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWEEPS_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def train_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 MB (the shared ``corpus`` is 300 KB) with its BPE-512 cache: what these runs learn from."""
    out = tmp_path_factory.mktemp("corpus") / "synthetic"
    prepare_synthetic(out, size_bytes=1_000_000, seed=0)
    load_tokens(out, "bpe", 512)  # encode once for every run below
    return out


def tiny_config(corpus: Path, **overrides: Any) -> TrainConfig:
    values: dict[str, Any] = {
        "corpus": str(corpus),
        "tokenizer": "bpe",
        "vocab_size": 512,
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "d_ff": 256,
        "seq_len": 64,
        "batch_size": 16,
        "grad_accum": 1,
        "lr": 1e-2,
        "warmup_tokens": 10_000,
        "max_tokens": 16_384,
        "eval_every_tokens": 8_192,
        "eval_tokens": 1_024,
        "device": "cpu",
        "sample_tokens": 4,
    }
    values.update(overrides)
    return TrainConfig.from_dict(values)


@pytest.fixture(scope="module")
def trained(train_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult]:
    """A 2-layer model trained for ~200k tokens (a few seconds on 2 cores)."""
    run_dir = tmp_path_factory.mktemp("runs") / "trained"
    cfg = tiny_config(
        train_corpus,
        max_tokens=200_000,
        eval_every_tokens=100_000,
        eval_tokens=4_096,
        sample_tokens=8,
    )
    return run_dir, run(cfg, run_dir)


# --- the objective ------------------------------------------------------------------------------


class _Copy(torch.nn.Module):
    """A "model" that predicts, at position t, the token at position t (confidently)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(x, 16).float() * 50.0


def test_targets_are_the_inputs_shifted_by_one() -> None:
    x = torch.randint(0, 16, (4, 33), generator=torch.Generator().manual_seed(0))
    # Copying the input is perfect for an unshifted objective and wrong for the shifted one.
    unshifted = torch.nn.functional.cross_entropy(_Copy()(x).view(-1, 16), x.view(-1))
    assert float(unshifted) < 1e-6
    assert float(lm_loss(_Copy(), x)) > 10.0

    # A model that predicts input i + 1 at position i is perfect for the shifted objective.
    class Oracle(torch.nn.Module):
        def forward(self, inp: torch.Tensor) -> torch.Tensor:
            nxt = x[:, 1:]
            return torch.nn.functional.one_hot(nxt, 16).float() * 50.0

    assert float(lm_loss(Oracle(), x)) < 1e-6


def _fit_random_tokens(shifted: bool) -> float:
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    loss = torch.tensor(0.0)
    for _ in range(40):
        batch = torch.randint(0, 16, (16, 17), generator=gen)
        if shifted:
            loss = lm_loss(model, batch)
        else:  # the bug: target = input
            x = batch[:, :-1]
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 16), x.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


@pytest.mark.study
def test_random_tokens_cannot_be_learned_with_the_shift() -> None:
    # Uniform random tokens carry ln(16) = 2.77 nats each; only the unshifted bug gets near 0.
    assert _fit_random_tokens(shifted=True) > 0.9 * math.log(16)
    assert _fit_random_tokens(shifted=False) < 0.1


def test_accumulated_gradients_equal_the_full_batch() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=12)
    one, two = GPT(cfg), GPT(cfg)
    two.load_state_dict(one.state_dict())
    batch = torch.randint(0, 40, (8, 13), generator=torch.Generator().manual_seed(0))
    loss_one = accumulate_gradients(one, [batch])  # micro-batch 8 x 1
    loss_two = accumulate_gradients(two, [batch[:4], batch[4:]])  # micro-batch 4 x 2
    assert float(loss_one) == pytest.approx(float(loss_two), rel=1e-5)
    for (name, p), q in zip(one.named_parameters(), two.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7), name
    # Without the 1/n scaling the accumulated gradient would be twice as large: detectable.
    g = next(one.parameters()).grad
    assert not torch.allclose(2 * g, g, atol=1e-7)


def test_learning_rate_warms_up_then_decays_by_tokens(train_corpus: Path) -> None:
    cfg = tiny_config(train_corpus, lr=1e-2, warmup_tokens=10_240, max_tokens=102_400)
    assert lr_at(0, cfg) < lr_at(5_120, cfg) < lr_at(10_240, cfg) == pytest.approx(1e-2)
    assert lr_at(50_000, cfg) < 1e-2
    assert lr_at(102_400, cfg) == pytest.approx(1e-3)


# --- a real run --------------------------------------------------------------------------------


def test_a_two_layer_model_beats_the_unigram_baseline(trained: tuple[Path, RunResult]) -> None:
    run_dir, result = trained
    assert result.outcome == "complete" and result.exit_code == 0
    final = result.final_metrics
    assert final is not None
    assert final["unigram_gap"] > 0.1
    assert final["val_bpb"] < final["unigram_bpb"] - 0.1
    assert final["mean_kl_to_mean"] > 0.05  # predictions depend on the context
    assert result.best_val_bpb == pytest.approx(
        min(
            json.loads(line)["val_bpb"]
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        )
    )


def test_run_files_follow_the_trial_contract(trained: tuple[Path, RunResult]) -> None:
    run_dir, result = trained
    cfg = TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    assert cfg.max_tokens == 200_000
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in rows] == [100_352, 200_704]  # every 100k, and the end
    for row in rows:
        assert list(row) == list(METRIC_KEYS)
        assert [s["prompt"] for s in row["samples"]] == list(cfg.sample_prompts)
        assert row["peak_mem_bytes"] > 0 and row["tokens_per_s"] > 0
        assert row["unk_rate_targets"] == 0.0  # BPE is lossless
        # The learning rate summed over the steps taken, as the schedule says it (the verdicts
        # wait for it; a resumed run recomputes it, and test_resume compares rows exactly).
        assert row["lr_sum"] == pytest.approx(lr_sum(row["tokens"], cfg), rel=1e-12)
    on_disk = json.loads((run_dir / "result.json").read_text())
    assert set(on_disk) == RESULT_KEYS
    assert read_result(run_dir) == RunResult.from_dict(on_disk) == result
    assert on_disk["params"] == param_breakdown(cfg.model_config())
    assert on_disk["tokens_seen"] == 200_704 and on_disk["bytes_per_token"] > 1
    ckpt = torch.load(run_dir / "best.pt", weights_only=True)
    assert ckpt["fingerprint"] == cfg.fingerprint()
    assert not list(run_dir.glob(".*tmp"))  # atomic writes leave no temporary file


def test_generate_continues_a_prompt_from_the_best_checkpoint(
    trained: tuple[Path, RunResult],
) -> None:
    run_dir, _ = trained
    text = generate(run_dir, "<Q>How do I", max_new_tokens=12, temperature=0.8, seed=3)
    assert text.startswith("<Q>How do I") and len(text) > len("<Q>How do I")
    assert text == generate(run_dir, "<Q>How do I", max_new_tokens=12, temperature=0.8, seed=3)
    greedy = generate(run_dir, "", max_new_tokens=5, temperature=0.0, top_k=None)
    assert greedy.startswith("<D>")


def test_a_checkpoint_from_another_config_is_rejected(
    trained: tuple[Path, RunResult], tmp_path: Path
) -> None:
    run_dir, _ = trained
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["d_ff"] = 128
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SweepsError, match="another config"):
        generate(other, "<Q>", max_new_tokens=2)
    (other / "best.pt").unlink()
    with pytest.raises(SweepsError, match=r"best\.pt does not exist"):
        generate(other, "<Q>", max_new_tokens=2)


# --- determinism and outcomes --------------------------------------------------------------------


def _curve(run_dir: Path) -> list[tuple[float, float, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["train_loss"], r["val_loss"], r["val_bpb"]) for r in rows]


@pytest.mark.study
def test_same_config_and_seed_give_the_same_loss_curve(train_corpus: Path, tmp_path: Path) -> None:
    cfg = tiny_config(train_corpus, grad_accum=2, batch_size=8, dropout=0.1)
    run(cfg, tmp_path / "a")
    run(cfg, tmp_path / "b")
    run(tiny_config(train_corpus, grad_accum=2, batch_size=8, dropout=0.1, seed=1), tmp_path / "c")
    assert len(_curve(tmp_path / "a")) == 2
    assert _curve(tmp_path / "a") == _curve(tmp_path / "b")
    assert _curve(tmp_path / "a") != _curve(tmp_path / "c")


@pytest.mark.study
def test_forced_oom_ends_as_oom_with_a_complete_result(train_corpus: Path, tmp_path: Path) -> None:
    # 256 x 64 x 512 fp32 logits are 32 MiB a copy: far beyond a 20 MB allowance.
    cfg = tiny_config(train_corpus, batch_size=256, cpu_memory_limit_bytes=20_000_000)
    run_dir = tmp_path / "oom"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWEEPS_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lm.train", str(run_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == outcomes.EXIT_CODES["oom"] == 3, proc.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert set(result) == RESULT_KEYS
    assert result["outcome"] == "oom" and result["exit_code"] == 3
    assert "memory" in result["reason"] and result["params"]["total"] > 0


def test_sigterm_ends_as_interrupted(train_corpus: Path, tmp_path: Path) -> None:
    cfg = tiny_config(train_corpus, max_tokens=1_000_000)
    before = signal.getsignal(signal.SIGTERM)

    def stop(row: dict) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    result = run(cfg, tmp_path / "r", on_eval=stop)
    assert result.outcome == "interrupted" and result.exit_code == 6
    assert result.tokens_seen < 1_000_000 and result.n_evals == 1
    assert json.loads((tmp_path / "r" / "result.json").read_text())["outcome"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back


def test_nan_loss_ends_as_diverged(
    train_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = step_mod.lm_loss
    monkeypatch.setattr(step_mod, "lm_loss", lambda m, b: real(m, b) * float("nan"))
    result = run(tiny_config(train_corpus), tmp_path / "r")
    assert result.outcome == "diverged" and result.exit_code == 4
    assert "nan" in result.reason and result.steps == 0


def test_an_infinite_gradient_norm_without_fp16_ends_as_diverged(
    train_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only an enabled (fp16) scaler may skip such a step; a disabled one must not hide it.
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: torch.tensor(math.inf))
    result = run(tiny_config(train_corpus), tmp_path / "r")
    assert result.outcome == "diverged" and result.exit_code == 4
    assert result.reason.startswith("gradient norm is inf at step 1") and result.steps == 0


def test_without_fp16_every_step_updates_the_weights(
    train_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stepped: list[int] = []
    real = step_mod.make_optimizer

    def counted(*args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        optimizer = real(*args, **kwargs)
        optimizer.register_step_post_hook(lambda *_: stepped.append(1))
        return optimizer

    monkeypatch.setattr(step_mod, "make_optimizer", counted)  # the warm-up's
    monkeypatch.setattr(train_mod, "make_optimizer", counted)  # the run's
    result = run(tiny_config(train_corpus), tmp_path / "r")
    assert result.outcome == "complete" and result.steps == 16
    assert len(stepped) == 1 + result.steps  # the warm-up's step, then every training step


def test_wall_limit_ends_as_timeout_with_final_metrics(train_corpus: Path, tmp_path: Path) -> None:
    result = run(tiny_config(train_corpus, max_wall_s=1e-6), tmp_path / "r")
    assert result.outcome == "timeout" and result.exit_code == 5
    assert result.steps == 1 and result.final_metrics is not None
    assert (tmp_path / "r" / "best.pt").exists()
    assert " s of CPU in " in result.reason and "thread" in result.reason, result.reason


def test_a_bug_ends_as_crashed_with_its_traceback(
    train_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(train_mod, "evaluate", boom)
    result = run(tiny_config(train_corpus), tmp_path / "r")
    assert result.outcome == "crashed" and result.exit_code == 1
    assert result.reason == "ValueError: boom" and "Traceback" in (result.traceback or "")
    assert json.loads((tmp_path / "r" / "result.json").read_text())["outcome"] == "crashed"


def test_progress_reports_tokens(train_corpus: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    run(
        tiny_config(train_corpus, max_tokens=4_096, eval_every_tokens=4_096),
        tmp_path / "r",
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen[-1] == (4_096, 4_096) and len(seen) == 4


# --- the child entry and bad input ---------------------------------------------------------------


def test_child_entry_rejects_bad_config_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"corpus": "x", "d_ff": 0}))
    assert main([str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "d_ff must be >= 1, got d_ff=0" in err and "\n" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


def test_child_entry_rejects_a_missing_corpus_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    cfg = tiny_config(tmp_path / "no-such-corpus")
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert main([str(run_dir)]) == 2
    assert "no-such-corpus" in capsys.readouterr().err
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]
    assert main([str(tmp_path / "missing")]) == 2
    assert main([]) == 2


def test_a_training_split_shorter_than_a_window_is_its_own_outcome(
    train_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lm.tokens

    real = lm.tokens.load_tokens

    def short(*args: Any, **kwargs: Any) -> Any:
        cache = real(*args, **kwargs)
        return dataclasses.replace(cache, train=cache.train[:64])

    monkeypatch.setattr(lm.tokens, "load_tokens", short)
    # Not bad input (the config and the corpus are each fine): the configuration's own ending,
    # counted by the orchestrator rather than re-queued as an environment failure.
    result = run(tiny_config(train_corpus, seq_len=64), tmp_path / "r")
    assert result.outcome == outcomes.TOO_LITTLE_DATA
    assert "the training split has 64 tokens, fewer than seq_len" in result.reason
    assert json.loads((tmp_path / "r" / "result.json").read_text())["outcome"] == result.outcome


def test_fp16_on_a_cpu_only_machine_is_bad_input(train_corpus: Path, tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: device auto resolves to it")
    with pytest.raises(SweepsError, match="fp16"):
        run(tiny_config(train_corpus, precision="fp16", device="auto"), tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.study
def test_bf16_autocast_trains_on_the_cpu(train_corpus: Path, tmp_path: Path) -> None:
    result = run(
        tiny_config(train_corpus, precision="bf16", max_tokens=4_096, eval_every_tokens=4_096),
        tmp_path / "r",
    )
    assert result.outcome == "complete", result.reason
    assert result.final_metrics is not None and math.isfinite(result.final_metrics["val_loss"])


def test_an_oom_releases_the_runs_memory_before_the_result_is_written(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frames of the run that ran out of memory (its model, activations) are gone when
    ``release_memory`` runs: inside the except block the traceback kept them, and CUDA's
    ``empty_cache`` then returned nothing."""
    import weakref

    held: list[weakref.ref] = []
    alive_at_release: list[bool] = []

    def out_of_memory(self: Any, progress: Any, on_eval: Any) -> tuple[str, str]:
        activations = torch.zeros(1024, 1024)  # what train()'s frame holds when it fails
        held.append(weakref.ref(activations))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    real_release = train_mod._RunState.release_memory

    def release(self: Any) -> None:
        real_release(self)
        alive_at_release.append(held[0]() is not None)

    monkeypatch.setattr(train_mod._RunState, "train", out_of_memory)
    monkeypatch.setattr(train_mod._RunState, "release_memory", release)
    result = run(tiny_config(corpus), tmp_path / "r")
    assert result.outcome == "oom" and "Tried to allocate" in result.reason
    assert alive_at_release == [False]


def test_a_cublas_allocation_failure_ends_as_oom(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cublas(self: Any, progress: Any, on_eval: Any) -> tuple[str, str]:
        raise RuntimeError(
            "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
        )

    monkeypatch.setattr(train_mod._RunState, "train", cublas)
    result = run(tiny_config(corpus), tmp_path / "r")
    assert (result.outcome, result.exit_code) == ("oom", outcomes.EXIT_CODES["oom"])
    assert "CUBLAS_STATUS_ALLOC_FAILED" in result.reason


def test_a_gpu_run_caps_its_cpu_threads(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a cap each of a dozen children packed on one GPU started a pool of every core."""
    from lm import host

    monkeypatch.setattr(train_mod, "resolve_device", lambda name: torch.device("cuda", 0))
    monkeypatch.setattr(host, "cpu_ids", lambda: list(range(16)))
    monkeypatch.delenv(host.NUM_THREADS_ENV, raising=False)
    assert train_mod._setup(tiny_config(corpus)).threads == host.GPU_RUN_THREADS
