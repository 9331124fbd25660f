"""lm.flops: a hand count of the classic configuration, the evaluation schedule of lm.train, and
torch's own FlopCounterMode on lm.model.GPT."""

from __future__ import annotations

import math

import pytest

from lm import flops
from lm.config import TrainConfig, param_breakdown
from lm.errors import SweepsError


def cfg_of(**kw: object) -> TrainConfig:
    return TrainConfig.from_dict({"corpus": "/nonexistent-corpus", **kw})


#: The classic configuration: one block, d_model 200, d_ff 800, 254 positions, 300 words, tied.
CLASSIC = {
    "tokenizer": "word",
    "vocab_size": 300,
    "d_model": 200,
    "n_layers": 1,
    "d_ff": 800,
    "seq_len": 254,
}


def test_classic_configuration_matches_a_hand_count() -> None:
    cfg = cfg_of(**CLASSIC)
    d, f, t, v = 200, 800, 254, 300
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # qkv 120,600 + proj 40,200 = 160,800
    ffn = (d * f + f) + (f * d + d)  # up 160,800 + down 160,200 = 321,000
    norms = 2 * d + 2 * d + 2 * d  # the block's two LayerNorms and the final one: 1,200
    n = attention + ffn + norms  # N without embeddings: 483,000
    embedding = v * d + t * d  # token 60,000 + position 50,800 (the tied head adds none)
    head = v * d  # the head's matmul: 60,000 parameters' worth of compute per token
    dense = 2 * (n + head)  # 1,086,000
    scores = 2 * 1 * t * d  # QK^T and AV over half the window (causal): 101,600
    per_token = 3 * (dense + scores)  # training: 3,562,800
    assert (n, embedding, dense, scores, per_token) == (
        483_000,
        110_800,
        1_086_000,
        101_600,
        3_562_800,
    )

    tokens = 247 * 16 * 254  # 16 x 254 tokens a step, 247 steps to pass 1,000,000
    got = flops.count(cfg)
    assert got.params_non_embedding == n
    assert got.params_embedding == embedding
    assert got.params == param_breakdown(cfg.model_config())["total"]
    assert got.head_params == head
    assert got.dense_forward_per_token == dense
    assert got.attention_forward_per_token == scores
    assert got.recompute_per_token == 0
    assert got.flops_per_token == per_token
    assert got.tokens == tokens == 1_003_808
    assert got.flops == per_token * tokens
    assert got.flops_6nd == 6 * n * tokens
    assert got.flops_6nd_with_embedding == 6 * (n + embedding) * tokens
    # Evaluations at 250k, 500k, 750k and 1M tokens (the last step passes 1M: no extra one),
    # each over 32,768 // 254 = 129 windows of 254 targets, forward only.
    assert got.n_evals == 4
    assert got.eval_tokens == 4 * 129 * 254
    assert got.eval_flops == (dense + scores) * 4 * 129 * 254
    assert got.total_flops == got.flops + got.eval_flops


def test_untied_head_is_an_embedding_parameter_and_the_same_compute() -> None:
    tied = flops.count(cfg_of(**CLASSIC), 1000)
    untied = flops.count(cfg_of(**CLASSIC, tie_weights=False), 1000)
    assert untied.params_embedding == tied.params_embedding + 300 * 200
    assert untied.params_non_embedding == tied.params_non_embedding
    assert untied.flops == tied.flops


def test_checkpointing_recomputes_the_blocks_forward_not_the_head() -> None:
    plain = flops.count(cfg_of(**CLASSIC), 1000)
    ck = flops.count(cfg_of(**CLASSIC, checkpointing=True), 1000)
    blocks = 483_000 - 2 * 200  # N less the final LayerNorm
    down = 800 * 200 + 200  # the FFN's down projection: torch's checkpoint stops before it
    assert ck.recompute_per_token == 2 * (blocks - down) + 101_600 == 746_400
    assert ck.flops_per_token == plain.flops_per_token + ck.recompute_per_token
    # Below the x4/3 rule of thumb: no head, no down projection recomputed.
    assert ck.flops_per_token / plain.flops_per_token == pytest.approx(1.209, abs=1e-3)


def test_attention_term_grows_linearly_with_seq_len() -> None:
    a = flops.count(cfg_of(seq_len=128), 1000)
    b = flops.count(cfg_of(seq_len=256), 1000)
    assert b.attention_forward_per_token == 2 * a.attention_forward_per_token
    assert b.dense_forward_per_token == a.dense_forward_per_token


def test_real_vocab_and_short_validation_split_are_used() -> None:
    cfg = cfg_of(**CLASSIC)
    assert flops.count(cfg, 1000, vocab_size=280).head_params == 280 * 200
    # A validation split of 1,000 tokens holds (1000 - 1) // 254 = 3 windows, not 129.
    assert flops.count(cfg, n_evals=2, val_tokens=1000).eval_tokens == 2 * 3 * 254


@pytest.mark.parametrize(
    ("seq_len", "eval_tokens", "val_tokens"),
    [(4, 32, 1000), (4, 32, 9), (4, 32, 5), (4, 3, 1000), (7, 100, 50), (2, 10, 11)],
)
def test_the_child_cuts_as_many_windows_as_the_estimates_count(
    seq_len: int, eval_tokens: int, val_tokens: int
) -> None:
    import numpy as np

    from lm.evaluation import eval_windows

    val = np.arange(val_tokens, dtype=np.int64)
    ids, _ = eval_windows(val, np.ones(val_tokens, dtype=np.int64), seq_len, eval_tokens)
    assert len(ids) == flops.eval_windows(eval_tokens, seq_len, val_tokens)


def _simulated_evals(cfg: TrainConfig) -> tuple[int, int]:
    """lm.train's loop, step by step: (tokens trained, evaluations)."""
    tokens, n, next_eval = 0, 0, cfg.eval_every_tokens
    while tokens < cfg.max_tokens:
        tokens += cfg.tokens_per_step
        if tokens >= next_eval or tokens >= cfg.max_tokens:
            n += 1
            while next_eval <= tokens:
                next_eval += cfg.eval_every_tokens
    return tokens, n


@pytest.mark.parametrize(
    ("batch", "seq", "max_tokens", "every"),
    [
        (16, 128, 1_000_000, 250_000),
        (4, 64, 10_000, 256),
        (4, 64, 10_000, 100),
        (2, 50, 999, 1000),
        (3, 7, 5000, 21),
        (8, 32, 4096, 5000),
        (1, 2, 10, 3),
    ],
)
def test_planned_evals_follow_the_training_loop(
    batch: int, seq: int, max_tokens: int, every: int
) -> None:
    cfg = cfg_of(batch_size=batch, seq_len=seq, max_tokens=max_tokens, eval_every_tokens=every)
    tokens, n = _simulated_evals(cfg)
    assert flops.planned_tokens(cfg) == tokens
    assert flops.planned_evals(cfg, tokens) == n


def test_bad_tokens_are_refused() -> None:
    with pytest.raises(SweepsError, match="tokens must be an integer >= 0"):
        flops.count(cfg_of(), -1)


# --- utilisation -------------------------------------------------------------------------------


def test_device_peaks_by_name_and_precision() -> None:
    assert flops.device_peak("NVIDIA H200", "bf16") == 989e12
    assert flops.device_peak("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert flops.device_peak("NVIDIA H100 PCIe", "bf16") == 756e12
    assert flops.device_peak("NVIDIA A100-SXM4-80GB", "fp32") == 19.5e12
    assert flops.device_peak("NVIDIA L40S", "bf16") is None  # not L4
    assert flops.device_peak("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 units
    assert flops.device_peak("cpu", "fp32") is None


def test_mfu() -> None:
    assert flops.mfu(989e12 * 10, 20.0, 989e12) == pytest.approx(0.5)
    with pytest.raises(SweepsError, match="seconds > 0"):
        flops.mfu(1.0, 0.0, 989e12)


# --- against torch's count ---------------------------------------------------------------------

SMALL_MODELS = [
    CLASSIC,
    {
        "vocab_size": 1000,
        "d_model": 64,
        "n_layers": 3,
        "n_heads": 4,
        "d_ff": 256,
        "seq_len": 64,
        "tie_weights": False,
    },
    {
        "vocab_size": 512,
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 2,
        "d_ff": 128,
        "seq_len": 128,
        "checkpointing": True,
    },
]


@pytest.mark.parametrize("shape", SMALL_MODELS)
def test_matmul_flops_match_torch_flop_counter(shape: dict[str, object]) -> None:
    """Forward and backward of one batch: torch counts matmuls only (no biases or LayerNorms,
    2-4% of N here) and the whole T x T square, which the naive path does compute."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from lm.model import GPT
    from lm.step import lm_loss

    # The naive path: torch 2.x counts the CPU's fused sdpa kernel as zero FLOPs.
    cfg = cfg_of(**{**shape, "attention": "naive", "tokenizer": shape.get("tokenizer", "bpe")})
    torch.manual_seed(0)
    model = GPT(cfg.model_config())
    model.train()
    batch = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len + 1))
    with FlopCounterMode(display=False) as counter:
        lm_loss(model, batch).backward()
    measured = counter.get_total_flops()
    got = flops.count(cfg, 2 * cfg.seq_len)
    masked_half = 3 * got.attention_forward_per_token * got.tokens
    if cfg.checkpointing:
        masked_half += got.attention_forward_per_token * got.tokens  # recomputed too
    full_square = got.flops + masked_half
    assert math.isclose(measured, full_square, rel_tol=0.02), (measured, full_square)
    assert measured < full_square  # what torch leaves out is the biases and LayerNorms


def test_cooldown_reads_are_training_compute() -> None:
    """A read's branch trains whole steps over its decay; they count beside the run's tokens,
    and a finished run's result.json gives the same count (``trained``)."""
    # 100 tokens a step; reads at 1,000 and 2,050 (-> 2,100); 0.5 of the tokens before each.
    cfg = cfg_of(
        tokenizer="byte",
        vocab_size=260,
        seq_len=100,
        batch_size=1,
        max_tokens=10_000,
        eval_every_tokens=5_000,
        lr_schedule="wsd",
        cooldown_reads=[1_000, 2_050],
        cooldown_fraction=0.5,
    )
    assert flops.planned_reads(cfg) == (2, 500 + 1_100)  # 1,050 rounded up to whole steps
    plain = flops.count(cfg, 10_000, n_evals=2)
    got = flops.count(cfg)
    assert got.cooldown_tokens == 1_600 and got.tokens == 10_000
    assert got.flops == got.flops_per_token * 11_600 == plain.flops * 11_600 // 10_000
    assert got.n_evals == 4  # two of its own, one per read
    result = {
        "tokens_seen": 10_000,
        "n_evals": 2,
        "n_reads": 2,
        "cooldown_tokens_total": 1_600,
        "vocab_size": 260,
    }
    assert flops.trained(cfg, result) == got
    assert flops.trained(cfg_of(), {"tokens_seen": 1_000, "n_evals": 1}) == flops.count(
        cfg_of(), 1_000, n_evals=1
    )
