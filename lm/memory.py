"""Analytic peak-memory estimate of one training run, every term named (arithmetic, no torch).

``estimate(cfg, device) -> MemoryEstimate`` predicts what ``python -m lm.train`` will measure as
``peak_mem_bytes``: on the CPU the child's peak resident set (``ru_maxrss``: everything the
process ever held at once, the interpreter and torch included); on CUDA
``torch.cuda.max_memory_allocated`` (tensors only: ``MemoryEstimate.allocated``) plus what the
CUDA context and the caching allocator hold beyond it, because a budget is about the whole
device.

Notation: B micro-batch (``batch_size``), T ``seq_len``, C ``d_model``, H ``n_heads``, F ``d_ff``,
V ``vocab_size``, L ``n_layers``, P parameters (a tied head counted once). ``a`` is the byte size
of an activation that autocast lowers (4 in fp32, 2 in bf16/fp16); ``s`` that of the attention
scores. The terms (``bytes`` is each term's size; ``at_peak`` what it holds at the peak moment):

- ``weights``: P x 4 (fp32 master weights, also under autocast) + the causal-mask buffers
  (L x T x T bools); with bf16/fp16 autocast also the low-precision copies of every matmul weight
  that autocast makes and autograd saves (2 bytes per matmul parameter).
- ``grads``: P x 4. Gradients are freed after every optimizer step (``zero_grad(set_to_none)``),
  so they are live at the loss-backward peak only when ``grad_accum > 1`` (the next micro-batch
  runs with the previous ones' gradients held); they are always live at the end of backward.
- ``optimizer``: AdamW's two fp32 states per parameter, 2 x P x 4.
- activations saved for backward, per layer (``grad_accum`` does not multiply them: micro-batches
  run one after another):
  - ``embeddings``: token + position embedding output feeding the first block, B x T x C x 4.
  - ``residual``: the residual stream each block keeps for its LayerNorms (block input and
    mid-block sum), 2 x B x T x C x 4 per layer, + the final LayerNorm's input.
  - ``norms``: LayerNorm outputs as the next matmul saves them (B x T x C x a) + mean/rstd
    (2 x B x T x 4), two per layer and the final one.
  - ``attention``: q, k, v and the attention output, 4 x B x T x C x a per layer.
  - ``attention_scores``: ``naive`` keeps the softmax probabilities B x H x T x T x s per layer
    (with dropout also the dropout mask and output: 2 more); ``sdpa`` keeps only the kernel's
    logsumexp, B x H x T x 4 (on the CPU, sdpa with dropout > 0 falls back to the math path and
    is counted like naive). At the attention-backward peak, two more score-sized tensors exist
    (the gradients of the probabilities and of the scores): so naive memory grows with T^2.
  - ``ffn``: the up projection's output and the GELU's, 2 x B x T x F x a per layer.
  - dropout > 0 adds a same-size mask per dropout site (fp32 noise on the CPU, 1-byte masks on
    CUDA), counted in the term of the tensor it masks.
  With ``checkpointing`` only each block's input is kept (in ``residual``) plus, in backward, one
  block's recomputed activations.
- ``logits``: the B x T x V logits: fp32 B x T x V x 4 exactly; under bf16/fp16 autocast the
  low-precision logits (B x T x V x 2) plus the fp32 upcast the cross-entropy reads (x 4).
- ``cross_entropy``: the loss's working set at the start of backward beyond ``logits``: the saved
  fp32 log-probabilities and the gradient copies, so that logits + cross_entropy = 3 x B x T x V x 4
  (measured with torch's saved-tensor hooks and allocation events).
- ``evaluation``: the evaluation batch (b = min(B, eval windows)) runs without gradients, but the
  collapse statistics hold four fp32 b x T x V tensors at once (logits, log-probabilities,
  probabilities and their product): it becomes the peak when V is large and the model small.
- ``data`` (CPU): token-cache pages the run touches (the memmap is file-backed: random windows
  fault in 64 KiB around each read, so the expected count of distinct 64 KiB blocks of the
  training file), the evaluation windows and the unigram tables.
- ``allocator``: what the allocator holds beyond the live tensors at the peak. CPU (glibc):
  once the first frees have raised malloc's dynamic mmap threshold, every tensor under 32 MiB
  comes from the heap, and the heap keeps its high-water mark (freed holes are reused, not
  returned); tensors of 32 MiB and more are mmap'ed and unmapped on free. So the resident tensors
  peak at heap + fragmentation + the largest mmap'ed set, where heap and mapped are each the
  largest over the moments below and fragmentation = min(0.5 x heap, 48 MiB + 0.1 x heap)
  (fitted on ``tests/bench/bench_memory.py``; glibc's reuse varies run to run by up to ~10 %, so
  the fit leans high). CUDA: the caching allocator's reserved-but-unallocated slack,
  ``CUDA_ALLOCATOR_SLACK`` (10 %) of ``allocated``.
- ``overhead``: CPU: the child's baseline resident set once torch, numpy and tiktoken are
  imported and ``lm.train``'s warm-up step ran (thread pool started): ``CPU_BASELINE_BYTES``
  (316 MiB measured for ``python -m lm.train``; a child forked from ``sweeps.forkserver`` has not
  touched torch's library pages itself and needs ``CPU_FORK_SAVING_BYTES`` = 53 MiB less), plus
  ``CPU_BASELINE_PER_THREAD`` per intra-op thread (measured flat from 1 to 4 threads), a BPE
  tokenizer's tables (4 MiB + 720 bytes per rank) and oneDNN's bf16 kernels (20 MiB) when used.
  CUDA: the context (``CUDA_CONTEXT_BYTES``) and the cuBLAS workspace.

The peak is the largest of four moments, each a sum of the terms live then: the start of
backward (all activations + logits + cross-entropy; gradients only with ``grad_accum > 1``),
the top block's backward (the loss head freed; naive: two extra score-sized gradients), the end
of backward (all gradients, the embedding's dense gradient, AdamW's temporaries) and the
evaluation. ``total = sum(at_peak)`` over the terms; ``peak_moment`` names the moment that won
and ``moments`` gives each one's tensor bytes. ``allocated`` is the tensors at the peak (+ the
cuBLAS workspace on CUDA): what ``torch.cuda.max_memory_allocated`` measures. The tensor part was
checked against torch's own allocation events and saved-tensor hooks (within 1-9 %, mostly
over); the whole on the CPU against ``ru_maxrss`` of real runs (``tests/bench/bench_memory.py``:
17 configurations, vocab 260-16k, seq_len 64-1024, d_ff 1-4 x d_model, micro-batch 1-128, both
attentions, fp32 and bf16, checkpointing, dropout, grad_accum: all within 10 %).

Calibration and budgets live in ``sweeps.preflight``: a study keeps the median of measured /
predicted over its finished trials (once it has 3, clamped to [0.5, 2]) and multiplies later
predictions by it; ``memory_budget = "auto"`` is 90 % of the GPU's memory (shared by the workers
on it), or on the CPU 80 % of ``MemAvailable`` divided among the workers; a CPU child's enforced
limit (RLIMIT_DATA beyond its start-up footprint) is the budget minus the baseline, never less
than the predicted growth x 1.4 + 64 MiB.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm.config import TrainConfig, param_breakdown
from lm.errors import SweepsError

#: Resident set of a ``python -m lm.train`` child before its model exists (interpreter, torch,
#: numpy, tiktoken, the warm-up step's lazily imported modules, the intra-op thread pool), measured
#: with torch 2.x on Linux x86-64: 331 MB for a byte-level run whatever the thread count (1-4).
CPU_BASELINE_BYTES = 316 * 2**20
#: A child forked from ``sweeps.forkserver`` (torch already imported there) does not touch the
#: pages of torch's shared libraries that a fresh interpreter's imports touch: 53 MiB less.
CPU_FORK_SAVING_BYTES = 53 * 2**20
LAUNCHERS = ("subprocess", "fork")
#: Per intra-op thread (stacks and per-thread scratch of the BLAS/oneDNN pools).
CPU_BASELINE_PER_THREAD = 256 * 2**10
#: bf16 autocast on the CPU loads oneDNN's low-precision kernels.
CPU_BF16_BYTES = 20 * 2**20
#: A BPE tokenizer (tiktoken's rank tables and the JSON they come from): fixed part and per rank.
BPE_FIXED_BYTES = 4 * 2**20
BPE_BYTES_PER_RANK = 720
#: glibc's largest dynamic mmap threshold: blocks this big are always mmap'ed (and returned on
#: free; with malloc's header a 32 MiB tensor is above it).
MMAP_THRESHOLD_MAX = 32 * 2**20
#: What the heap holds beyond its live high-water mark (fragmentation): a share of it for small
#: heaps, a smaller share plus a constant for big ones (fitted on tests/bench/bench_memory.py:
#: 10-110 MiB measured over heaps of 30-740 MiB; it varies run to run, so this leans high).
CPU_HEAP_FRAGMENTATION = 0.5
CPU_HEAP_FRAGMENTATION_LARGE = 0.1
CPU_HEAP_FRAGMENTATION_BASE = 48 * 2**20
#: What the CUDA context takes on the device (not counted by max_memory_allocated).
CUDA_CONTEXT_BYTES = 512 * 2**20
#: Reserved-but-unallocated share of the caching allocator at the peak (block rounding, splits).
CUDA_ALLOCATOR_SLACK = 0.10
#: cuBLAS/cuBLASLt workspaces (allocated through the caching allocator, so in ``allocated``).
CUDA_WORKSPACE_BYTES = 32 * 2**20
#: Read fault-around of file-backed mappings on Linux (``fault_around_bytes``).
FAULT_AROUND_BYTES = 64 * 2**10
#: Bytes per token assumed when the token cache has not been built yet (a BPE-like ratio).
GUESS_BYTES_PER_TOKEN = 4.0

DEVICES = ("cpu", "cuda")
_Item = tuple[str, int, int]

TERM_ORDER = (
    "weights",
    "grads",
    "optimizer",
    "embeddings",
    "residual",
    "norms",
    "attention",
    "attention_scores",
    "ffn",
    "logits",
    "cross_entropy",
    "evaluation",
    "data",
    "allocator",
    "overhead",
)
ACTIVATION_TERMS = ("embeddings", "residual", "norms", "attention", "attention_scores", "ffn")


@dataclass(frozen=True)
class Term:
    """One named part of the estimate: its size, what it holds at the peak, and its formula."""

    name: str
    bytes: int
    at_peak: int
    formula: str
    inputs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes": self.bytes,
            "at_peak": self.at_peak,
            "formula": self.formula,
            "inputs": dict(self.inputs),
        }


@dataclass(frozen=True)
class MemoryEstimate:
    """The predicted peak of one run: ``total`` bytes, as the sum of the terms' ``at_peak``."""

    device: str
    precision: str
    attention: str
    vocab_size: int
    params: dict[str, int]
    terms: tuple[Term, ...]
    total: int
    allocated: int
    peak_moment: str
    moments: dict[str, int]

    def term(self, name: str) -> Term:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def activations(self) -> int:
        """Activations saved for backward over all layers (the per-layer terms' sizes)."""
        return sum(self.term(n).bytes for n in ACTIVATION_TERMS)

    def bytes(self) -> dict[str, int]:
        """Each term's size, ``activations`` (their sum over the per-layer terms) and ``total``."""
        out = {t.name: t.bytes for t in self.terms}
        out["activations"] = self.activations
        out["allocated"] = self.allocated
        out["total"] = self.total
        return out

    def to_dict(self) -> dict[str, Any]:
        p = self.params
        return {
            "device": self.device,
            "precision": self.precision,
            "attention": self.attention,
            "vocab_size": self.vocab_size,
            "params_total": p["total"],
            "params_ffn_per_layer": p["ffn_per_layer"],
            "params_attention_per_layer": p["attention_per_layer"],
            "params_embedding": p["embedding"],
            "params": dict(p),
            "bytes": self.bytes(),
            "at_peak": {t.name: t.at_peak for t in self.terms},
            "peak_moment": self.peak_moment,
            "moments": dict(self.moments),
            "terms": [t.to_dict() for t in self.terms],
        }


# --- the estimate ------------------------------------------------------------------------------


def estimate(
    cfg: TrainConfig,
    device: str = "cpu",
    *,
    threads: int | None = None,
    train_tokens: int | None = None,
    eval_windows: int | None = None,
    launcher: str = "subprocess",
) -> MemoryEstimate:
    """Predicted peak memory of training ``cfg`` on ``device`` ("cpu" or "cuda").

    ``threads`` (CPU intra-op threads; default: this machine's cores), ``train_tokens`` and
    ``eval_windows`` (default: read from the corpus's token cache when it exists) refine the
    small terms; none is needed. ``launcher``: how the CPU child starts, ``subprocess``
    (``python -m lm.train``) or ``fork`` (from ``sweeps.forkserver``: a smaller baseline).
    """
    if launcher not in LAUNCHERS:
        raise SweepsError(f"launcher must be subprocess or fork, got launcher={launcher!r}")
    device = _device_kind(device)
    if cfg.precision == "fp16" and device == "cpu":
        raise SweepsError("precision fp16 needs a CUDA device; estimate it with device cuda")
    dims = _Dims.of(cfg)
    cuda = device == "cuda"
    lowp = cfg.precision in ("bf16", "fp16")
    a = 2 if lowp else 4  # bytes of an activation autocast lowers
    f4 = 4
    B, T, C, H, F, V, L = dims.B, dims.T, dims.C, dims.H, dims.F, dims.V, dims.L
    BT, BTC, BTF, BTV, BHT, BHTT = B * T, B * T * C, B * T * F, B * T * V, B * H * T, B * H * T * T
    params = param_breakdown(cfg.model_config())
    P = params["total"]
    terms: dict[str, Term] = {}
    dropout = cfg.dropout > 0

    # -- static --
    matmul_params = L * (3 * C * C + C * C + 2 * C * F) + V * C  # qkv, proj, up, down, head
    mask_bytes = L * T * T  # the naive path's bool causal mask, registered in both paths
    lowp_copies = 2 * matmul_params if lowp else 0
    weights = P * f4 + mask_bytes + lowp_copies
    weights_formula = "P x 4 + L x T x T" + (" + 2 x matmul_params" if lowp else "")
    grads = P * f4
    optimizer = 2 * P * f4

    # -- activations saved for backward (all layers) --
    # Scores are materialized by naive attention, and on the CPU by sdpa with dropout (its
    # math fallback); s: bytes of a score element (CUDA autocast runs softmax in fp32 and keeps
    # a low-precision copy for the next matmul).
    materialized = cfg.attention == "naive" or (not cuda and dropout)
    if materialized:
        s_saved = (4 + 2) if (cuda and lowp) else a
        s = a
    else:
        s_saved = s = 0
    mask_site = 1 if cuda else None  # CUDA dropout mask: bool; CPU: a noise tensor of the dtype

    def drop_mask(elements: int, elem_bytes: int) -> int:
        if not dropout:
            return 0
        return elements * (mask_site if mask_site is not None else elem_bytes)

    emb = BTC * f4 + drop_mask(BTC, f4)
    per_block_residual = 2 * BTC * f4
    per_block_norms = 2 * (BTC * a + 2 * BT * f4)
    per_block_attention = 4 * BTC * a + drop_mask(BTC, a)  # + the residual dropout's mask
    if materialized:
        scores_per_layer = BHTT * s_saved
        if dropout:  # the dropout mask and the dropped probabilities the next matmul saves
            scores_per_layer += drop_mask(BHTT, s) + BHTT * s
    else:
        scores_per_layer = BHT * f4  # the fused kernel's logsumexp
    per_block_ffn = 2 * BTF * a + drop_mask(BTC, a)
    final_residual = BTC * f4
    final_norm = BTC * a + 2 * BT * f4
    per_block = (
        per_block_residual + per_block_norms + per_block_attention + scores_per_layer
        + per_block_ffn
    )
    if cfg.checkpointing:
        # Each block keeps only its input; backward recomputes one block at a time.
        residual_bytes = L * BTC * f4 + final_residual
        norms_bytes = final_norm
        attention_bytes = scores_bytes = ffn_bytes = 0
    else:
        residual_bytes = L * per_block_residual + final_residual
        norms_bytes = L * per_block_norms + final_norm
        attention_bytes = L * per_block_attention
        scores_bytes = L * scores_per_layer
        ffn_bytes = L * per_block_ffn

    # -- the loss head --
    logits = BTV * (2 + 4) if lowp else BTV * 4
    ce_working = 3 * BTV * 4  # log-probs saved + gradient w.r.t. them + gradient of the logits
    cross_entropy = ce_working - logits

    # -- moments: what is live at each candidate peak, as (term, bytes, size of its largest
    # single tensor); the tensor size decides where the CPU allocator puts it (heap or mmap).
    max_param = max(V * C, C * F, 3 * C * C, T * C) * f4
    static: list[_Item] = [("weights", weights, max_param), ("optimizer", optimizer, max_param)]
    grads_live = grads if cfg.grad_accum > 1 else 0
    qkv_unit = (3 if not materialized else 1) * BTC * a  # sdpa keeps views of one qkv tensor
    scores_unit = BHTT * s if materialized else BHT * f4
    activations: list[_Item] = [
        ("embeddings", emb, BTC * f4),
        ("residual", residual_bytes, BTC * f4),
        ("norms", norms_bytes, BTC * a),
        ("attention", attention_bytes, qkv_unit),
        ("attention_scores", scores_bytes, scores_unit),
        ("ffn", ffn_bytes, BTF * a),
    ]
    moments: dict[str, list[_Item]] = {}
    # The start of backward: every activation, the logits' gradient and the saved log-probs.
    moments["loss backward"] = [
        *static, ("grads", grads_live, max_param), *activations,
        ("logits", logits, BTV * 4), ("cross_entropy", cross_entropy, BTV * 4),
    ]
    # The top block's backward: the loss head is freed, so are the block's FFN activations; a
    # checkpointed block is recomputed first; materialized scores get two gradient copies.
    head_grad = V * C * f4
    top_ffn = (2 * BTF * a) if not cfg.checkpointing else 0
    attn_transient = 2 * BHTT * s if materialized else 0
    rec = per_block if cfg.checkpointing else 0
    moments["block backward"] = [
        *static, ("grads", max(grads_live, head_grad), max_param),
        ("embeddings", emb, BTC * f4),
        ("residual", residual_bytes + (per_block_residual if rec else 0), BTC * f4),
        ("norms", norms_bytes + (per_block_norms if rec else 0), BTC * a),
        ("attention", attention_bytes + (per_block_attention if rec else 0), qkv_unit),
        ("attention_scores", scores_bytes + (scores_per_layer if rec else 0) + attn_transient,
         scores_unit),
        ("ffn", ffn_bytes + (per_block_ffn if rec else 0) - top_ffn, BTF * a),
    ]
    # The end of backward and the optimizer step: every gradient, the embedding's dense
    # gradient, AdamW's per-parameter temporaries.
    moments["end of backward"] = [*static, ("grads", grads + head_grad + 2 * max_param,
                                            max_param)]
    # Evaluation (no gradients) of b = min(B, windows) windows at a time.
    n_windows = eval_windows if eval_windows is not None else _eval_windows(cfg)
    b = max(1, min(B, n_windows))
    bT = b * T
    eval_head = (4 * bT * V * 4, bT * V * 4)  # logits, log-probs, probs, their product
    eval_attn = (5 * bT * C * 4 + (2 * b * H * T * T * a if cfg.attention == "naive" else 0),
                 b * H * T * T * a if cfg.attention == "naive" else 3 * bT * C * 4)
    eval_ffn = (3 * bT * C * 4 + 2 * bT * F * a, bT * F * a)
    m_eval, eval_unit = max(eval_head, eval_attn, eval_ffn)
    moments["evaluation"] = [*static, ("evaluation", m_eval, eval_unit)]

    live = {name: sum(item[1] for item in items) for name, items in moments.items()}
    peak_moment = max(live, key=lambda k: live[k])
    at: dict[str, int] = dict.fromkeys(TERM_ORDER, 0)
    for name, size, _ in moments[peak_moment]:
        at[name] += size
    allocated = live[peak_moment]

    data_bytes, data_inputs = _data_bytes(cfg, dims, train_tokens, n_windows, cuda)
    at["data"] = data_bytes
    if cuda:
        allocated += CUDA_WORKSPACE_BYTES
        at["allocator"] = int(CUDA_ALLOCATOR_SLACK * allocated)
        allocator_formula = "slack x allocated"
        allocator_inputs: dict[str, Any] = {"slack": CUDA_ALLOCATOR_SLACK}
    else:
        # glibc: tensors up to 32 MiB come from the heap once the first frees have raised the
        # mmap threshold, and the heap keeps its high-water mark (fragmented, not trimmed);
        # bigger ones are mmap'ed and unmapped on free.
        heap = max(sum(i[1] for i in items if i[2] < MMAP_THRESHOLD_MAX)
                   for items in moments.values())
        mapped = max(sum(i[1] for i in items if i[2] >= MMAP_THRESHOLD_MAX)
                     for items in moments.values())
        fragmentation = min(CPU_HEAP_FRAGMENTATION * heap,
                            CPU_HEAP_FRAGMENTATION_BASE + CPU_HEAP_FRAGMENTATION_LARGE * heap)
        resident = heap + int(fragmentation) + mapped
        at["allocator"] = max(0, resident - allocated)
        allocator_formula = "heap + fragmentation + mapped - allocated"
        allocator_inputs = {"heap": heap, "mapped": mapped, "fragmentation": int(fragmentation)}
    overhead, overhead_formula, overhead_inputs = _overhead(cfg, cuda, threads, launcher)
    at["overhead"] = overhead
    total = sum(at.values())

    terms: dict[str, Term] = {}

    def add(name: str, size: int, formula: str, **inputs: Any) -> None:
        terms[name] = Term(name, int(size), int(at[name]), formula, inputs)

    add("weights", weights, weights_formula, P=P, L=L, T=T, matmul_params=matmul_params)
    add("grads", grads, "P x 4", P=P)
    add("optimizer", optimizer, "2 x P x 4", P=P)
    add("embeddings", emb, "B x T x C x 4" + (" x 2 (dropout)" if dropout else ""),
        B=B, T=T, C=C)
    add("residual", residual_bytes,
        "(L + 1) x B x T x C x 4" if cfg.checkpointing else "(2L + 1) x B x T x C x 4",
        B=B, T=T, C=C, L=L)
    add("norms", norms_bytes, "(2L + 1) x B x T x (C x a + 8)"
        if not cfg.checkpointing else "B x T x (C x a + 8)", B=B, T=T, C=C, L=L, a=a)
    add("attention", attention_bytes, "L x 4 x B x T x C x a",
        B=B, T=T, C=C, L=L, a=a)
    add("attention_scores", scores_bytes,
        ("L x B x H x T x T x " + ("(s + 2a)" if dropout else "s")) if materialized
        else "L x B x H x T x 4",
        B=B, H=H, T=T, L=L, s=s_saved if materialized else 4,
        backward_transient=attn_transient)
    add("ffn", ffn_bytes, "L x 2 x B x T x F x a",
        B=B, T=T, F=F, L=L, a=a)
    add("logits", logits, "B x T x V x (2 + 4)" if lowp else "B x T x V x 4", B=B, T=T, V=V)
    add("cross_entropy", cross_entropy, "3 x B x T x V x 4 - logits",
        B=B, T=T, V=V)
    add("evaluation", m_eval, "max(4 x b x T x V x 4, one block's forward)",
        b=b, T=T, V=V, windows=n_windows)
    add("data", data_bytes, data_inputs.pop("formula"), **data_inputs)
    add("allocator", at["allocator"], allocator_formula, **allocator_inputs)
    add("overhead", overhead, overhead_formula, **overhead_inputs)
    return MemoryEstimate(
        device=device,
        precision=cfg.precision,
        attention=cfg.attention,
        vocab_size=V,
        params=params,
        terms=tuple(terms[n] for n in TERM_ORDER),
        total=int(total),
        allocated=int(allocated),
        peak_moment=peak_moment,
        moments={k: int(v) for k, v in live.items()},
    )


# --- helpers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dims:
    B: int
    T: int
    C: int
    H: int
    F: int
    V: int
    L: int

    @classmethod
    def of(cls, cfg: TrainConfig) -> _Dims:
        return cls(cfg.batch_size, cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.d_ff,
                   cfg.vocab_size, cfg.n_layers)


def _device_kind(device: str) -> str:
    if not isinstance(device, str):
        raise SweepsError(f"device must be cpu or cuda, got device={device!r}")
    kind = device.split(":")[0]
    if kind not in DEVICES:
        raise SweepsError(f"device must be cpu or cuda (or cuda:N), got device={device!r}")
    return kind


def _split_block(total: int, residual: int, norms: int, attention: int, scores: int,
                 ffn: int) -> dict[str, int]:
    """A recomputed block's activations by term (zeros when nothing is recomputed)."""
    if not total:
        return dict.fromkeys(("residual", "norms", "attention", "attention_scores", "ffn"), 0)
    return {"residual": residual, "norms": norms, "attention": attention,
            "attention_scores": scores, "ffn": ffn}


def _cache_meta(cfg: TrainConfig) -> dict[str, Any] | None:
    """The token cache's meta.json for this tokenizer, when it has been built."""
    name = f"{cfg.tokenizer}-{cfg.vocab_size}" + ("-lower" if cfg.lowercase else "")
    path = Path(cfg.corpus) / "cache" / name / "meta.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _manifest(cfg: TrainConfig) -> dict[str, Any] | None:
    try:
        return json.loads((Path(cfg.corpus) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _token_counts(cfg: TrainConfig) -> tuple[int | None, int | None]:
    """(train tokens, val tokens) from the token cache, else guessed from the manifest."""
    meta = _cache_meta(cfg)
    if meta is not None:
        try:
            return int(meta["train_tokens"]), int(meta["val_tokens"])
        except (KeyError, TypeError, ValueError):
            pass
    manifest = _manifest(cfg)
    if manifest is not None:
        per = 1.0 if cfg.tokenizer == "byte" else GUESS_BYTES_PER_TOKEN
        try:
            return (int(manifest["train_bytes"] / per), int(manifest["val_bytes"] / per))
        except (KeyError, TypeError, ValueError):
            pass
    return None, None


def _eval_windows(cfg: TrainConfig) -> int:
    """Windows of the fixed validation subset (``lm.train.eval_windows``)."""
    wanted = max(1, cfg.eval_tokens // cfg.seq_len)
    _, val_tokens = _token_counts(cfg)
    if val_tokens is not None:
        available = max(1, (val_tokens - 1) // cfg.seq_len)
        return min(wanted, available)
    return wanted


def _data_bytes(cfg: TrainConfig, d: _Dims, train_tokens: int | None, n_windows: int,
                cuda: bool) -> tuple[int, dict[str, Any]]:
    """Token pages touched and the evaluation tensors (CPU resident set; CUDA: the windows)."""
    eval_tensors = n_windows * (2 * d.T + 1) * 8  # ids (N, T + 1) and nbytes (N, T), int64
    unigram = d.V * (8 * 3 + 40)  # counts list (Python ints), float64 tables
    if cuda:
        return 0, {"formula": "host memory only (0 on the device)"}
    if train_tokens is None:
        train_tokens, _ = _token_counts(cfg)
    item = 4 if d.V > 65536 else 2
    steps = math.ceil(cfg.max_tokens / cfg.tokens_per_step)
    windows = steps * cfg.grad_accum * d.B
    if train_tokens is None:
        # No corpus to look at: assume the whole run's windows touch distinct blocks, capped.
        touched = min(windows * FAULT_AROUND_BYTES, 16 * 2**20)
        file_bytes = None
    else:
        file_bytes = train_tokens * item
        blocks = max(1, math.ceil(file_bytes / FAULT_AROUND_BYTES))
        per_window = 1 + (d.T + 1) * item / FAULT_AROUND_BYTES
        expected = blocks * (1 - math.exp(-windows * per_window / blocks))
        touched = min(file_bytes, int(expected * FAULT_AROUND_BYTES))
    val_pages = min(cfg.eval_tokens, n_windows * d.T + 1) * item * 2
    total = int(touched + val_pages + eval_tensors + unigram)
    return total, {
        "formula": "token pages touched + eval windows",
        "train_file_bytes": file_bytes,
        "train_windows": windows,
        "token_pages": int(touched),
        "eval_windows": n_windows,
    }


def _overhead(cfg: TrainConfig, cuda: bool, threads: int | None,
              launcher: str) -> tuple[int, str, dict[str, Any]]:
    if cuda:
        return (
            CUDA_CONTEXT_BYTES + CUDA_WORKSPACE_BYTES,
            "context + workspace",
            {"context": CUDA_CONTEXT_BYTES, "workspace": CUDA_WORKSPACE_BYTES},
        )
    n = threads if threads is not None else _cpu_count()
    return (
        cpu_baseline_bytes(cfg, n, launcher),
        "baseline + threads + tokenizer (+ bf16 kernels)",
        {"baseline": CPU_BASELINE_BYTES, "launcher": launcher, "threads": n,
         "bpe_ranks": cfg.vocab_size if cfg.tokenizer == "bpe" else 0,
         "bf16_kernels": CPU_BF16_BYTES if cfg.precision == "bf16" else 0},
    )


def _cpu_count() -> int:
    import os

    env = os.environ.get("SWEEPS_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_baseline_bytes(cfg: TrainConfig | None = None, threads: int | None = None,
                       launcher: str = "subprocess") -> int:
    """The CPU child's resident set before its model exists (the ``overhead`` term)."""
    n = threads if threads is not None else _cpu_count()
    base = CPU_BASELINE_BYTES + CPU_BASELINE_PER_THREAD * n
    if launcher == "fork":
        base -= CPU_FORK_SAVING_BYTES
    if cfg is not None:
        if cfg.tokenizer == "bpe":
            base += BPE_FIXED_BYTES + BPE_BYTES_PER_RANK * cfg.vocab_size
        if cfg.precision == "bf16":
            base += CPU_BF16_BYTES
    return base
