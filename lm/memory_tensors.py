"""The tensors one training step of ``lm.train`` holds, term by term and moment by moment: the
torch side of ``lm.memory``'s estimate (arithmetic, no torch). The notation, the terms and the
four moments are ``lm.memory``'s docstring; ``lm.memory.estimate`` adds what the process holds
beyond the tensors (data, the allocator, the interpreter and the CUDA context).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from lm.config import TrainConfig

#: glibc's largest dynamic mmap threshold: blocks this big are always mmap'ed (and returned on
#: free; with malloc's header a 32 MiB tensor is above it).
MMAP_THRESHOLD_MAX = 32 * 2**20
#: The per-layer terms of the activations saved for backward, in ``lm.memory.TERM_ORDER``'s order.
ACTIVATION_TERMS = ("embeddings", "residual", "norms", "attention", "attention_scores", "ffn")


# --- the shape of the run ----------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The run's dimensions and what its precision, device and options make of them."""

    B: int
    T: int
    C: int
    H: int
    F: int
    V: int
    L: int
    a: int  # bytes of an activation that autocast lowers
    lowp: bool  # bf16/fp16 autocast
    cuda: bool
    dropout: bool
    checkpointing: bool
    grad_accum: int
    # Scores are materialized by naive attention, and on the CPU by sdpa with dropout (its
    # math fallback).
    materialized: bool
    naive: bool = False

    @classmethod
    def of(cls, cfg: TrainConfig, *, cuda: bool) -> Shape:
        lowp = cfg.precision in ("bf16", "fp16")
        dropout = cfg.dropout > 0
        assert cfg.vocab_size is not None  # TrainConfig sets it
        return cls(
            cfg.batch_size,
            cfg.seq_len,
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            cfg.vocab_size,
            cfg.n_layers,
            a=2 if lowp else 4,
            lowp=lowp,
            cuda=cuda,
            dropout=dropout,
            checkpointing=cfg.checkpointing,
            grad_accum=cfg.grad_accum,
            materialized=cfg.attention == "naive" or (not cuda and dropout),
            naive=cfg.attention == "naive",
        )

    def drop_mask(self, elements: int, elem_bytes: int) -> int:
        """A dropout site's saved mask: CUDA keeps 1-byte masks, the CPU a noise tensor."""
        if not self.dropout:
            return 0
        return elements * (1 if self.cuda else elem_bytes)


# --- the terms ---------------------------------------------------------------------------------


class Static(NamedTuple):
    """Weights, gradients and optimizer states: live for the whole run."""

    weights: int
    grads: int
    optimizer: int
    params: int  # P
    matmul_params: int
    max_param: int  # bytes of the largest parameter tensor (heap or mmap on the CPU)


def read_branch(cfg: TrainConfig, s: Shape, static: Static) -> int:
    """The host copy of the weights and AdamW's states a cooldown read keeps (``lm.snapshot``):
    on the CPU it is the child's memory; on CUDA none of the device's."""
    if not cfg.cooldown_reads or s.cuda:
        return 0
    return 3 * static.params * 4


def weights_and_optimizer(s: Shape, params: int) -> Static:
    matmul_params = s.L * (3 * s.C * s.C + s.C * s.C + 2 * s.C * s.F) + s.V * s.C  # qkv, proj,
    mask_bytes = s.L * s.T * s.T  # the naive path's bool causal mask, registered in both paths
    lowp_copies = 2 * matmul_params if s.lowp else 0  # autocast's weight copies, saved
    max_param = max(s.V * s.C, s.C * s.F, 3 * s.C * s.C, s.T * s.C) * 4
    return Static(
        weights=params * 4 + mask_bytes + lowp_copies,
        grads=params * 4,
        optimizer=2 * params * 4,
        params=params,
        matmul_params=matmul_params,
        max_param=max_param,
    )


class Scores(NamedTuple):
    """The attention scores: what a layer saves, and what backward adds for a moment."""

    per_layer: int
    saved_elem: int  # bytes per saved score element ("s")
    unit: int  # the largest single score tensor
    backward_transient: int  # the gradients of the probabilities and of the scores


def attention_scores(s: Shape) -> Scores:
    BHT = s.B * s.H * s.T
    if not s.materialized:
        return Scores(BHT * 4, 4, BHT * 4, 0)  # the fused kernel's logsumexp
    BHTT = BHT * s.T
    # CUDA autocast runs softmax in fp32 and keeps a low-precision copy for the next matmul.
    saved = (4 + 2) if (s.cuda and s.lowp) else s.a
    per_layer = BHTT * saved
    if s.dropout:  # the dropout mask and the dropped probabilities the next matmul saves
        per_layer += s.drop_mask(BHTT, s.a) + BHTT * s.a
    return Scores(per_layer, saved, BHTT * s.a, 2 * BHTT * s.a)


class Block(NamedTuple):
    """Activations one transformer block saves for backward, by term."""

    residual: int
    norms: int
    attention: int
    attention_scores: int
    ffn: int


def block(s: Shape, scores: Scores) -> Block:
    BT, BTC = s.B * s.T, s.B * s.T * s.C
    return Block(
        residual=2 * BTC * 4,  # block input and mid-block sum, for the LayerNorms
        norms=2 * (BTC * s.a + 2 * BT * 4),  # two LayerNorm outputs + mean/rstd
        # q, k, v, the output (+ naive's q scaled before q @ k^T) + the residual dropout
        attention=qkv_saved(s) * BTC * s.a + s.drop_mask(BTC, s.a),
        attention_scores=scores.per_layer,
        ffn=2 * s.B * s.T * s.F * s.a + s.drop_mask(BTC, s.a),  # up projection and GELU
    )


def qkv_saved(s: Shape) -> int:
    """(B, T, C) tensors the attention saves per layer: q, k, v and the output; naive's q
    scaled before ``q @ k^T`` (``lm.model``: fp16-safe) is one more."""
    return 5 if s.naive else 4


class Activations(NamedTuple):
    """Activations saved for backward over all layers, by term (in ``ACTIVATION_TERMS``)."""

    embeddings: int
    residual: int
    norms: int
    attention: int
    attention_scores: int
    ffn: int


def activations(s: Shape, block: Block) -> Activations:
    BT, BTC = s.B * s.T, s.B * s.T * s.C
    embeddings = BTC * 4 + s.drop_mask(BTC, 4)
    final_residual = BTC * 4  # the final LayerNorm's input
    final_norm = BTC * s.a + 2 * BT * 4
    if s.checkpointing:
        # Each block keeps only its input; backward recomputes one block at a time.
        return Activations(embeddings, s.L * BTC * 4 + final_residual, final_norm, 0, 0, 0)
    return Activations(
        embeddings,
        s.L * block.residual + final_residual,
        s.L * block.norms + final_norm,
        s.L * block.attention,
        s.L * block.attention_scores,
        s.L * block.ffn,
    )


def activation_units(s: Shape, scores: Scores) -> Activations:
    """The largest single tensor of each activation term (heap or mmap on the CPU)."""
    BTC = s.B * s.T * s.C
    qkv = (1 if s.materialized else 3) * BTC * s.a  # sdpa keeps views of one qkv tensor
    return Activations(BTC * 4, BTC * 4, BTC * s.a, qkv, scores.unit, s.B * s.T * s.F * s.a)


class LossHead(NamedTuple):
    """The B x T x V logits and the cross-entropy's working set beyond them."""

    logits: int
    cross_entropy: int
    unit: int  # one fp32 B x T x V tensor


def loss_head(s: Shape) -> LossHead:
    BTV = s.B * s.T * s.V
    logits = BTV * (2 + 4) if s.lowp else BTV * 4
    working = 3 * BTV * 4  # log-probs saved + gradient w.r.t. them + gradient of the logits
    return LossHead(logits, working - logits, BTV * 4)


class Evaluation(NamedTuple):
    """The evaluation's largest working set (no gradients), over b windows at a time."""

    bytes: int
    unit: int
    batch: int  # b
    windows: int


def evaluation(cfg: TrainConfig, s: Shape, windows: int) -> Evaluation:
    b = max(1, min(s.B, windows))
    bT = b * s.T
    naive = cfg.attention == "naive"
    head = (4 * bT * s.V * 4, bT * s.V * 4)  # logits, log-probs, probs, their product
    attn = (
        5 * bT * s.C * 4 + (2 * b * s.H * s.T * s.T * s.a if naive else 0),
        b * s.H * s.T * s.T * s.a if naive else 3 * bT * s.C * 4,
    )
    ffn = (3 * bT * s.C * 4 + 2 * bT * s.F * s.a, bT * s.F * s.a)
    size, unit = max(head, attn, ffn)
    return Evaluation(size, unit, b, windows)


# --- the moments -------------------------------------------------------------------------------


class Part(NamedTuple):
    """What one term holds at a moment, and its largest single tensor (which decides where the
    CPU allocator puts it: the heap, or its own mapping)."""

    term: str
    bytes: int
    unit: int


@dataclass(frozen=True)
class Moment:
    """A candidate peak: the terms live at one point of a training step."""

    name: str
    parts: tuple[Part, ...]

    @property
    def live(self) -> int:
        return sum(p.bytes for p in self.parts)

    @property
    def heap(self) -> int:
        """Bytes in tensors small enough for glibc's heap (below ``MMAP_THRESHOLD_MAX``)."""
        return sum(p.bytes for p in self.parts if p.unit < MMAP_THRESHOLD_MAX)

    @property
    def mapped(self) -> int:
        """Bytes in tensors glibc maps (and unmaps on free) one by one."""
        return sum(p.bytes for p in self.parts if p.unit >= MMAP_THRESHOLD_MAX)


def moments(
    s: Shape,
    static: Static,
    block: Block,
    acts: Activations,
    scores: Scores,
    head: LossHead,
    evaluation: Evaluation,
) -> tuple[Moment, ...]:
    """The four candidate peaks of a step, in the order ties are broken."""
    mp = static.max_param
    resident = (Part("weights", static.weights, mp), Part("optimizer", static.optimizer, mp))
    units = activation_units(s, scores)
    # Gradients are freed after every step, so they are live during the next micro-batch's
    # backward only when grad_accum > 1.
    grads_live = static.grads if s.grad_accum > 1 else 0
    head_grad = s.V * s.C * 4
    loss_backward = Moment(
        "loss backward",
        (
            *resident,
            Part("grads", grads_live, mp),
            *(Part(name, getattr(acts, name), getattr(units, name)) for name in ACTIVATION_TERMS),
            Part("logits", head.logits, head.unit),
            Part("cross_entropy", head.cross_entropy, head.unit),
        ),
    )
    # The top block's backward: the loss head is freed, so are the block's FFN activations; a
    # checkpointed block is recomputed first; materialized scores get two gradient copies.
    rec = block if s.checkpointing else Block(0, 0, 0, 0, 0)
    top_ffn = 0 if s.checkpointing else 2 * s.B * s.T * s.F * s.a
    block_backward = Moment(
        "block backward",
        (
            *resident,
            Part("grads", max(grads_live, head_grad), mp),
            Part("embeddings", acts.embeddings, units.embeddings),
            Part("residual", acts.residual + rec.residual, units.residual),
            Part("norms", acts.norms + rec.norms, units.norms),
            Part("attention", acts.attention + rec.attention, units.attention),
            Part(
                "attention_scores",
                acts.attention_scores + rec.attention_scores + scores.backward_transient,
                units.attention_scores,
            ),
            Part("ffn", acts.ffn + rec.ffn - top_ffn, units.ffn),
        ),
    )
    # The end of backward and the optimizer step: every gradient, the embedding's dense
    # gradient, AdamW's per-parameter temporaries.
    end_of_backward = Moment(
        "end of backward", (*resident, Part("grads", static.grads + head_grad + 2 * mp, mp))
    )
    evaluating = Moment(
        "evaluation", (*resident, Part("evaluation", evaluation.bytes, evaluation.unit))
    )
    return loss_backward, block_backward, end_of_backward, evaluating
