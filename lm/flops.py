"""Training and evaluation FLOPs of one run, every term named (arithmetic, no torch).

``count(cfg, tokens=)`` counts what ``python -m lm.train`` computes, so trials can be
compared at equal compute and the scaling-law fits (``sweeps.scaling``) have an x axis.
``tests/lm/test_flops.py`` checks it against a hand count and against torch's own
``FlopCounterMode`` on ``lm.model.GPT``.

Notation as in ``lm.memory``: T ``seq_len``, C ``d_model``, F ``d_ff``, V ``vocab_size``, L
``n_layers``; D the training tokens (targets). A multiply-add is 2 FLOPs.

- **Parameters, two ways** (``lm.config.param_breakdown``). ``params_non_embedding`` is Kaplan
  et al.'s N: the blocks (attention and FFN weights and biases, LayerNorms) and the final
  LayerNorm. ``params_embedding`` is the token and position embeddings plus an untied head (a
  tied head is the token embedding: counted once, as a parameter).
- **The head's matmul is compute whether tied or not**: the (B, T, C) x (C, V) product runs in
  every forward. So the dense forward per token is ``2 (N + V C)`` (``dense_forward_per_token``);
  the embedding lookups (token and position) are gathers, not matmuls, and cost nothing here.
  N's biases and LayerNorm weights are counted at 2 FLOPs per parameter, as in the 6N rule
  (they are under 1% of N for the shapes this project trains).
- **Attention scores**: per token and layer, QK^T and AV each take 2 T C FLOPs over the whole
  window (4 L T C in all); the causal mask leaves on average half the keys of a query
  informative, and we count that half (``CAUSAL_FRACTION``: 2 L T C per token), as a causal
  flash kernel computes it. The naive path and the CPU's sdpa compute the full square (twice
  this term); ``FlopCounterMode`` counts the full square too, which the tests account for.
- **Training** is forward + backward = 3 x forward (the backward's two matmuls per forward
  matmul): ``flops_per_token = 3 (dense + attention)``, so ``6 N D`` is the classic rule's
  part. ``checkpointing`` recomputes each block's forward in backward, below the x4/3 rule of
  thumb: the head is not checkpointed, and torch's non-reentrant checkpoint stops recomputing
  once backward has the tensors it saved (early stopping, torch's default), so the FFN's down
  projection, whose output nothing saves, is not run again: ``recompute_per_token = 2 (N_blocks
  - L (F C + C)) + attention`` (measured with ``FlopCounterMode`` in the tests).
- **Cooldown reads** (``lm.cooldown``) train branches that are discarded: their tokens are
  training compute all the same, counted in ``flops`` beside D (``cooldown_tokens``), and
  their evaluations in ``n_evals``. ``trained`` counts what a finished run spent.
- **Evaluation** is forward only, ``dense + attention`` per evaluated token, over
  ``n_evals x windows x T`` tokens: the fixed validation windows (``lm.flops.eval_windows``:
  ``eval_tokens // seq_len`` of them, fewer when the validation split is shorter), once per
  evaluation (every ``eval_every_tokens`` and at the end, as the training loop schedules
  them). Kept apart from ``flops``: the compute axis is the training compute. The generated
  samples (``sample_prompts`` x ``sample_tokens`` short forwards per evaluation) are not
  counted.

``mfu(flops, seconds, peak)`` is the model FLOPs utilisation; ``device_peak(name, precision)``
reads the dense peaks of known GPUs from ``DEVICE_PEAKS``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from lm import schedule
from lm.config import TrainConfig, param_breakdown
from lm.errors import SweepsError

#: The share of the T x T attention scores counted as compute: a causal query reads half the
#: keys on average (a choice; 1.0 would count what the naive path computes).
CAUSAL_FRACTION = 0.5
#: Training = forward + backward, the backward twice the forward (gradients of inputs and
#: of weights).
TRAIN_MULTIPLIER = 3

#: Dense (no sparsity) peak FLOP/s by precision, from the vendors' data sheets; the first
#: pattern that matches the device name (``nvidia-smi``'s or torch's) wins. fp32 is the plain
#: (non-TF32) rate: ``lm.train`` leaves torch's default, TF32 off for matmuls.
DEVICE_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H200", {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12}),
    (r"H100.*(PCIe|PCIE)", {"bf16": 756e12, "fp16": 756e12, "fp32": 51e12}),
    (r"H100", {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12}),  # SXM
    (r"A100", {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12}),
    (r"\bL4\b", {"bf16": 121e12, "fp16": 121e12, "fp32": 30.3e12}),
    (r"V100", {"fp16": 125e12, "fp32": 15.7e12}),
)


@dataclass(frozen=True)
class Flops:
    """The FLOPs of one run (``flops``: training only), every term named."""

    tokens: int  # D: training tokens (targets) the count is for
    cooldown_tokens: int  # trained by cooldown reads' branches, beside D (``lm.cooldown``)
    params_non_embedding: int  # N
    params_embedding: int  # token + position embeddings (+ an untied head)
    head_params: int  # V x C: the head's matmul, compute whether tied or not
    dense_forward_per_token: int  # 2 (N + V C)
    attention_forward_per_token: int  # CAUSAL_FRACTION x 4 L T C
    recompute_per_token: int  # checkpointing: most of the blocks' forward again (else 0)
    flops_per_token: int  # 3 x forward + recompute
    flops: int  # flops_per_token x (D + cooldown_tokens)
    n_evals: int  # the run's own and its cooldown reads'
    eval_tokens: int  # evaluated targets over the run
    eval_flops: int  # forward only

    @property
    def params(self) -> int:
        """Distinct parameters (a tied head once): ``param_breakdown(...)["total"]``."""
        return self.params_non_embedding + self.params_embedding

    @property
    def flops_6nd(self) -> int:
        """The classic rule with N without embeddings (Kaplan): 6 N D."""
        return 6 * self.params_non_embedding * self.tokens

    @property
    def flops_6nd_with_embedding(self) -> int:
        """The classic rule with every parameter in N (Chinchilla's convention): 6 N D."""
        return 6 * self.params * self.tokens

    @property
    def total_flops(self) -> int:
        """Training and evaluation."""
        return self.flops + self.eval_flops


def planned_tokens(cfg: TrainConfig) -> int:
    """The tokens a run that completes trains: whole optimizer steps up to ``max_tokens``, or
    exactly ``max_tokens`` (whole sequences) when it was worked out from bytes or FLOPs: its last
    step then trains only what is left (``lm.budget``, ``lm.train``)."""
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    if "max_tokens" in cfg.derived:
        return cfg.max_tokens
    return math.ceil(cfg.max_tokens / cfg.tokens_per_step) * cfg.tokens_per_step


def per_token(cfg: TrainConfig, vocab_size: int | None = None) -> int:
    """Training FLOPs per token of ``cfg``'s model (``Flops.flops_per_token``): what a budget
    in FLOPs is converted with (``lm.budget``)."""
    return count(cfg, 0, n_evals=0, vocab_size=vocab_size).flops_per_token


def step_flops(cfg: TrainConfig, vocab_size: int | None = None) -> int:
    """Training FLOPs of one micro-step (a micro-batch's forward and backward): what a CPU
    run's threads are chosen by (``lm.host.trial_threads``)."""
    return per_token(cfg, vocab_size) * cfg.batch_size * cfg.seq_len


def planned_evals(cfg: TrainConfig, tokens: int) -> int:
    """Evaluations of a run that trained ``tokens`` in whole steps (``lm.train``'s schedule):
    one at each step that crosses a multiple of ``eval_every_tokens``, and one at the end."""
    step, every = cfg.tokens_per_step, cfg.eval_every_tokens
    assert every is not None  # resolved (lm.budget)
    steps = max(0, math.ceil(tokens / step))
    if steps == 0:
        return 0
    # A step that crosses at least one multiple evaluates once: every step when a step is at
    # least the interval, else each multiple falls in a different step.
    crossings = steps if step >= every else (steps * step) // every
    last_crosses = (steps * step) // every > ((steps - 1) * step) // every
    return crossings + (0 if last_crosses else 1)


def eval_windows(eval_tokens: int | None, seq_len: int, val_tokens: int | None = None) -> int:
    """How many windows the fixed validation subset holds: ``eval_tokens // seq_len``, at least
    one, and no more than a validation split of ``val_tokens`` tokens has (each window reads
    ``seq_len + 1`` tokens, consecutive windows share one). The one rule: the child cuts its
    windows by it (``lm.evaluation.eval_windows``), the FLOPs and memory estimates count by it."""
    wanted = max(1, (eval_tokens or 0) // seq_len)
    if val_tokens is None:
        return wanted
    return min(wanted, max(1, (val_tokens - 1) // seq_len))


def planned_reads(cfg: TrainConfig) -> tuple[int, int]:
    """(cooldown reads, tokens their branches train) of a run that completes."""
    points = schedule.read_points(cfg)
    return len(points), sum(schedule.branch_tokens(cfg, p) for p in points)


def trained(cfg: TrainConfig, result: dict[str, Any]) -> Flops:
    """The FLOPs a run spent, from its ``result.json`` (``RunResult.to_dict()``): the tokens it
    trained, its cooldown reads' included, its evaluations, its model's real vocabulary."""
    vocab = result.get("vocab_size")
    return count(
        cfg,
        result.get("tokens_seen", 0),
        n_evals=result.get("n_evals", 0) + result.get("n_reads", 0),
        cooldown_tokens=result.get("cooldown_tokens_total", 0),
        vocab_size=vocab if isinstance(vocab, int) else None,
    )


def count(
    cfg: TrainConfig,
    tokens: int | None = None,
    *,
    n_evals: int | None = None,
    val_tokens: int | None = None,
    vocab_size: int | None = None,
    cooldown_tokens: int | None = None,
) -> Flops:
    """The FLOPs of training ``cfg`` on ``tokens`` targets (default: ``planned_tokens``) and
    ``cooldown_tokens`` more in cooldown reads (default: as planned with ``tokens``, else 0).

    ``n_evals`` is the evaluations the run made, its reads' included (default: as scheduled for
    ``tokens``); ``val_tokens`` the validation split's length when known; ``vocab_size`` the
    model's real vocabulary when the tokenizer's differs from ``cfg.vocab_size``.
    """
    planned = tokens is None
    if tokens is None:
        tokens = planned_tokens(cfg)
    n_reads, read_tokens = planned_reads(cfg) if planned else (0, 0)
    if cooldown_tokens is None:
        cooldown_tokens = read_tokens
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise SweepsError(f"tokens must be an integer >= 0, got tokens={tokens!r}")
    model = cfg.model_config(vocab_size)
    parts = param_breakdown(model)
    L, T, C, V = model.n_layers, model.seq_len, model.d_model, model.vocab_size
    embedding = parts["embedding"] + parts["position"] + parts["lm_head"]
    non_embedding = parts["total"] - embedding
    head = V * C
    dense = 2 * (non_embedding + head)
    attention = round(CAUSAL_FRACTION * 4 * L * T * C)
    forward = dense + attention
    recompute = 0
    if model.checkpointing:
        blocks = L * (parts["attention_per_layer"] + parts["ffn_per_layer"] + 2 * 2 * C)
        down = L * (model.d_ff * C + C)  # not recomputed: torch's checkpoint stops before it
        recompute = 2 * (blocks - down) + attention
    per_token = TRAIN_MULTIPLIER * forward + recompute
    if n_evals is None:
        n_evals = planned_evals(cfg, tokens) + n_reads
    evaluated = n_evals * eval_windows(cfg.eval_tokens, cfg.seq_len, val_tokens) * T
    return Flops(
        tokens=tokens,
        cooldown_tokens=cooldown_tokens,
        params_non_embedding=non_embedding,
        params_embedding=embedding,
        head_params=head,
        dense_forward_per_token=dense,
        attention_forward_per_token=attention,
        recompute_per_token=recompute,
        flops_per_token=per_token,
        flops=per_token * (tokens + cooldown_tokens),
        n_evals=n_evals,
        eval_tokens=evaluated,
        eval_flops=forward * evaluated,
    )


# --- utilisation -----------------------------------------------------------------------------


def device_peak(name: str, precision: str) -> float | None:
    """The dense peak FLOP/s of a GPU named ``name`` at ``precision`` (fp32, bf16, fp16); None
    for a device not in ``DEVICE_PEAKS`` or a precision it lacks."""
    for pattern, peaks in DEVICE_PEAKS:
        if re.search(pattern, name or ""):
            return peaks.get(precision)
    return None


def mfu(flops: float, seconds: float, device_peak: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the device's peak (0..1, in practice)."""
    if not seconds > 0 or not device_peak > 0:
        raise SweepsError(
            f"mfu needs seconds > 0 and device_peak > 0, got seconds={seconds}, "
            f"device_peak={device_peak}"
        )
    return flops / seconds / device_peak
