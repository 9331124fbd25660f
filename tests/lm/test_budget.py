"""Budgets in bytes of text and in FLOPs (``lm.budget``): one unit governs each quantity, the
token counts are worked out per tokenizer, and a real run under ``max_bytes`` reads the same
text whatever its vocabulary (to within one sequence)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lm import budget, flops
from lm.config import BUDGET_DEFAULTS, TrainConfig
from lm.errors import SweepsError

SMALL = {
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "d_ff": 32,
    "seq_len": 16,
    "batch_size": 8,
    "warmup_tokens": 200,
    "sample_tokens": 2,
    "device": "cpu",
}


def test_one_unit_governs_each_quantity_and_tokens_are_the_default() -> None:
    cfg = TrainConfig(corpus="c")
    assert (cfg.max_tokens, cfg.eval_every_tokens, cfg.warmup_tokens, cfg.eval_tokens) == (
        BUDGET_DEFAULTS["max"],
        BUDGET_DEFAULTS["eval_every"],
        BUDGET_DEFAULTS["warmup"],
        BUDGET_DEFAULTS["eval"],
    )
    assert cfg.resolved and cfg.budget_unit() == "tokens"
    for given in (
        {"max_tokens": 10, "max_bytes": 40},
        {"max_bytes": 40, "max_flops": 1e9},
        {"eval_every_tokens": 5, "eval_every_flops": 1e6},
    ):
        with pytest.raises(SweepsError, match="give one of"):
            TrainConfig(corpus="c", **given)
    for bad in (
        {"max_bytes": 0},
        {"max_flops": -1.0},
        {"max_flops": math.inf},
        {"eval_bytes": 1},
        {"derived": ["max_tokens"]},
        {"derived": ["lr"]},
    ):
        with pytest.raises(SweepsError):
            TrainConfig(corpus="c", **bad)
    unresolved = TrainConfig(corpus="c", max_bytes=400_000)
    assert unresolved.max_tokens is None and not unresolved.resolved
    assert unresolved.budget_unit() == "bytes" and unresolved.budget_warnings() == []


def test_bytes_are_worked_out_in_whole_sequences_at_the_tokenizers_rate() -> None:
    cfg = TrainConfig(
        corpus="c",
        seq_len=64,
        max_bytes=400_000,
        eval_every_bytes=100_000,
        warmup_bytes=20_000,
        eval_bytes=30_000,
    )
    rate = budget.TextRate(train=4.4, val=4.3, measured=True)
    out = budget.resolve(cfg, rate)
    assert out.max_tokens == round(400_000 / 4.4 / 64) * 64 == 90_880
    assert (out.eval_every_tokens, out.warmup_tokens) == (round(100_000 / 4.4), round(20_000 / 4.4))
    assert out.eval_tokens == math.ceil(30_000 / 4.3)
    assert set(out.derived) == {"max_tokens", "eval_every_tokens", "warmup_tokens", "eval_tokens"}
    assert out.bytes_per_token == 4.4 and out.budget_unit() == "bytes"
    assert budget.max_amount(out) == 400_000
    # config.json round trip: the given bytes and the derived tokens both kept, one governing.
    again = TrainConfig.from_dict(json.loads(json.dumps(out.to_dict())))
    assert again == out and again.budget_unit() == "bytes"
    # A budget in bytes needs a rate: said, not guessed.
    with pytest.raises(SweepsError, match="bytes per token"):
        budget.resolve(cfg)


def test_flops_are_worked_out_from_the_models_flops_per_token() -> None:
    cfg = TrainConfig(corpus="c", **SMALL, vocab_size=512, max_flops=2e9)
    out = budget.resolve(cfg)
    per = flops.per_token(out)
    assert out.max_tokens == round(2e9 / per / out.seq_len) * out.seq_len
    assert abs(out.max_tokens * per - 2e9) <= per * out.seq_len / 2
    assert flops.planned_tokens(out) == out.max_tokens  # the last step trains only what is left


def test_an_override_replaces_the_budget_in_every_unit_and_works_tokens_out_again() -> None:
    rate = budget.TextRate(train=2.0, val=2.0, measured=True)
    old = budget.resolve(TrainConfig(corpus="c", max_bytes=64_000, seq_len=64), rate).to_dict()
    new = budget.override(old, {"max_tokens": 5_000})
    assert "max_bytes" not in new and new["max_tokens"] == 5_000 and "derived" not in new
    assert TrainConfig.from_dict(new).budget_unit() == "tokens"
    # Another vocabulary: the bytes govern, the old token count is dropped to be worked out.
    other = budget.override(old, {"vocab_size": 1024})
    assert other["max_bytes"] == 64_000 and "max_tokens" not in other
    assert not TrainConfig.from_dict(other).resolved


@pytest.fixture(scope="module")
def runs(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    """The same budget in bytes trained with two vocabularies of very different rates."""
    from lm.train import run

    out = {}
    for vocab in (260, 1024):
        cfg = TrainConfig(
            corpus=str(corpus),
            tokenizer="bpe",
            vocab_size=vocab,
            **SMALL,
            max_bytes=24_000,
            eval_every_bytes=12_000,
            eval_bytes=4_000,
        )
        run_dir = tmp_path_factory.mktemp(f"bytes-{vocab}")
        result = run(cfg, run_dir)
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        out[vocab] = {
            "result": result.to_dict(),
            "rows": rows,
            "config": json.loads((run_dir / "config.json").read_text()),
        }
    return out


@pytest.mark.study
def test_a_budget_in_bytes_trains_every_vocabulary_on_the_same_text(runs: dict) -> None:
    per_token = {v: r["config"]["bytes_per_token"] for v, r in runs.items()}
    assert per_token[1024] > 1.5 * per_token[260]  # really different rates
    for vocab, r in runs.items():
        result, cfg = r["result"], r["config"]
        assert result["outcome"] == "complete"
        assert cfg["max_bytes"] == 24_000 and "max_tokens" in cfg["derived"]
        # Exactly its derived tokens (whole sequences: the last step trains what is left)...
        assert result["tokens_seen"] == cfg["max_tokens"] and cfg["max_tokens"] % 16 == 0
        # ... which stand for the budget's bytes to within half a sequence.
        assert abs(result["train_bytes"] - 24_000) <= 16 * per_token[vocab] / 2 + 1
        assert r["rows"][-1]["train_bytes"] == result["train_bytes"]
    first, second = (runs[v]["result"]["train_bytes"] for v in (260, 1024))
    one_sequence = 16 * max(per_token.values())
    assert abs(first - second) <= one_sequence
    # Evaluations at the same text: every 12,000 bytes for both.
    for r in runs.values():
        assert [round(row["train_bytes"] / 12_000) for row in r["rows"]] == [1, 2]


@pytest.mark.study
def test_the_last_step_of_a_budget_in_bytes_is_a_partial_batch(runs: dict) -> None:
    for r in runs.values():
        cfg, result = r["config"], r["result"]
        per_step = cfg["batch_size"] * cfg["grad_accum"] * cfg["seq_len"]
        assert result["steps"] == math.ceil(cfg["max_tokens"] / per_step)
        if cfg["max_tokens"] % per_step:  # it did not round up to a whole step
            assert result["tokens_seen"] < result["steps"] * per_step


def test_eval_bytes_takes_the_windows_that_cover_the_same_text() -> None:
    import numpy as np

    from lm.train import eval_windows

    # Tokens of 1 byte (a byte tokenizer) and of 4 bytes (a wider one), 2 targets a window.
    val1, val4 = np.arange(200) % 7, np.arange(60) % 7
    ids1, nb1 = eval_windows(val1, np.ones(200, dtype=np.int64), 2, 32_768, eval_bytes=40)
    ids4, nb4 = eval_windows(val4, np.full(60, 4, dtype=np.int64), 2, 32_768, eval_bytes=40)
    assert int(nb1.sum()) == 40 and int(nb4.sum()) == 40
    assert ids1.shape == (20, 3) and ids4.shape == (5, 3)
