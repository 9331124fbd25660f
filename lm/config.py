"""Model and training configuration: plain validated dataclasses, no torch.

The orchestrator (``sweeps``) imports this module to build, validate and size trials without
paying for a torch import; the same field names are used by study specs and, kebab-cased, by CLI
flags (``--d-ff``), so one name means one thing everywhere. Every check raises ``SweepsError``
naming the field and the offending value (``d_ff must be >= 1, got d_ff=0``).

``param_breakdown`` lives here, not in ``model.py``, because it is pure arithmetic that the
orchestrator needs (to predict memory and to show what a trial will train) without building a
model; ``tests/lm/test_model.py`` checks it against the real module's parameter count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from lm.checks import check_bool, check_choice, check_int, check_number, require_int
from lm.errors import FieldError, SweepsError, closest

TOKENIZERS = ("word", "bpe", "byte")
ATTENTIONS = ("sdpa", "naive")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCHEDULES = ("cosine", "wsd")
DECAY_SHAPES = ("linear", "1-sqrt")
PARAMETRIZATIONS = ("sp", "mup")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
#: The units a budget can be given in, in the order of each ``BUDGETS`` entry.
BUDGET_UNITS = ("tokens", "bytes", "flops")
#: Each quantity a run is scheduled by, and its field in each unit (None: not in that unit).
BUDGETS: dict[str, tuple[str, str | None, str | None]] = {
    "max": ("max_tokens", "max_bytes", "max_flops"),
    "eval_every": ("eval_every_tokens", "eval_every_bytes", "eval_every_flops"),
    "warmup": ("warmup_tokens", "warmup_bytes", "warmup_flops"),
    "eval": ("eval_tokens", "eval_bytes", None),
}
#: In tokens, when no unit gives the quantity.
BUDGET_DEFAULTS = {"max": 1_000_000, "eval_every": 250_000, "warmup": 50_000, "eval": 32_768}
#: The smallest value of each (an evaluation needs two targets; a warm-up may be none).
BUDGET_MINIMUMS = {"max": 1, "eval_every": 1, "warmup": 0, "eval": 2}
#: Every field of ``BUDGETS`` but the token counts, and the derivation's record: absent from
#: resume checkpoints written before they existed, so left out of ``computation()`` at None.
BUDGET_EXTRA_FIELDS = (
    *(f for fields in BUDGETS.values() for f in fields[1:] if f),
    "derived",
    "bytes_per_token",
)
#: The largest seed torch's generators take (an unsigned 64-bit integer).
MAX_SEED = 2**64 - 1


def _help(text: str, *, set_by_tool: bool = False) -> Any:
    """Field metadata read by the CLI (``sweeps.cli.options``) for each generated flag (none for
    a field the tool sets)."""
    return {"help": text, "set_by_tool": set_by_tool}


# --- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    """A GPT decoder's shape: everything ``lm.model.GPT`` needs and nothing about training.
    Its defaults are ``TrainConfig``'s (which names them from here)."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 512
    seq_len: int = 128
    dropout: float = 0.0
    attention: Literal["sdpa", "naive"] = "sdpa"
    checkpointing: bool = False
    tie_weights: bool = True
    # The standard parametrization, or µP (Yang et al. 2022, lm.model): how init, learning rates,
    # attention and the readout scale with width. Under sp the two bases compute nothing.
    parametrization: Literal["sp", "mup"] = "sp"
    base_width: int = 128
    base_d_head: int | None = None

    def __post_init__(self) -> None:
        _validate_model_fields(self)

    @property
    def width_mult(self) -> float:
        """µP's width multiplier ``d_model / base_width`` (1 under sp: nothing scales)."""
        return self.d_model / self.base_width if self.parametrization == "mup" else 1.0

    @property
    def attention_mult(self) -> float:
        """The attention logits' scale relative to SP's ``1 / sqrt(d_head)``: µP's ``1 / d_head``
        times ``sqrt(base_d_head)``, the constant that makes it SP's at the base head width (1
        under sp, and under mup when the head width is the base's: heads scaled with width)."""
        if self.parametrization != "mup" or self.base_d_head is None:
            return 1.0
        return math.sqrt(self.base_d_head / (self.d_model // self.n_heads))


def _validate_model_fields(obj: object) -> None:
    """The model checks, shared by ``ModelConfig`` and ``TrainConfig`` (same names, same words)."""
    check_int(obj, "vocab_size", 2)
    check_int(obj, "d_model", 1)
    check_int(obj, "n_layers", 1)
    check_int(obj, "n_heads", 1)
    # d_ff = 1 is legal (the one-neuron ablation); 0 is a mistake.
    check_int(obj, "d_ff", 1)
    # One position shift needs at least two positions in a window.
    check_int(obj, "seq_len", 2)
    d_model, n_heads = obj.d_model, obj.n_heads  # type: ignore[attr-defined]
    if d_model % n_heads:
        raise SweepsError(
            f"d_model must be divisible by n_heads, got d_model={d_model}, n_heads={n_heads} "
            f"(d_model % n_heads = {d_model % n_heads})"
        )
    check_number(obj, "dropout", minimum=0.0, below=1.0)
    check_choice(obj, "attention", ATTENTIONS)
    check_bool(obj, "checkpointing")
    check_bool(obj, "tie_weights")
    check_choice(obj, "parametrization", PARAMETRIZATIONS)
    check_int(obj, "base_width", 1)
    if obj.base_d_head is not None:  # type: ignore[attr-defined]
        check_int(obj, "base_d_head", 1)


def param_breakdown(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of ``lm.model.GPT(cfg)`` by part, from arithmetic alone (no torch).

    Per block: LayerNorm (2d) + attention (qkv d x 3d + 3d, out d x d + d) + LayerNorm (2d) + FFN
    (d x f + f, f x d + d); then a final LayerNorm (2d); the output head shares the token
    embedding when ``tie_weights``, else it is a bias-free V x d matrix.
    """
    d, f, v, n = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layers
    embedding = v * d
    position = cfg.seq_len * d
    attention_per_layer = (d * 3 * d + 3 * d) + (d * d + d)
    ffn_per_layer = (d * f + f) + (f * d + d)
    norms = n * 2 * (2 * d) + 2 * d
    lm_head = 0 if cfg.tie_weights else v * d
    total = embedding + position + n * (attention_per_layer + ffn_per_layer) + norms + lm_head
    return {
        "embedding": embedding,
        "position": position,
        "attention_per_layer": attention_per_layer,
        "ffn_per_layer": ffn_per_layer,
        "norms": norms,
        "lm_head": lm_head,
        "total": total,
    }


# --- one training run --------------------------------------------------------------------------

_MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))
#: Fields that decide what the weights mean: a checkpoint only fits a config that agrees on these.
_IDENTITY_FIELDS = ("corpus", "tokenizer", "lowercase", *_MODEL_FIELDS)
#: µP's fields (``ModelConfig.parametrization``), added after checkpoints and fingerprints were
#: first written: under sp they compute nothing, so ``fingerprint`` and ``computation`` leave
#: them out there and an sp run's hashes are the ones it had before they existed.
PARAMETRIZATION_FIELDS = ("parametrization", "base_width", "base_d_head")
#: Fields that only place or bound a run, not what it computes: a resume checkpoint fits a config
#: that agrees on every other field (a preempted trial may come back on another node, device or
#: memory budget, with a longer wall-clock limit).
_PLACEMENT_FIELDS = (
    "device",
    "cpu_memory_limit_bytes",
    "cuda_memory_limit_bytes",
    "max_wall_s",
    "checkpoint_every_tokens",
)

#: The learning-rate schedule and its cooldown reads (``lm.schedule``, ``lm.cooldown``), recorded
#: in resume checkpoints. Added after resume checkpoints were first written: at their defaults
#: they compute what a run computed before they existed, so ``computation()`` leaves them out
#: there and such a checkpoint (or a re-queued trial's) still continues.
SCHEDULE_FIELDS = (
    "lr_schedule",
    "decay_fraction",
    "decay_shape",
    "cooldown_reads",
    "cooldown_fraction",
)


#: ``vocab_size`` when nothing sets it, for every tokenizer but byte (``default_vocab_size``).
DEFAULT_VOCAB_SIZE = 4096


def default_vocab_size(tokenizer: str) -> int:
    """``vocab_size`` when nothing sets it (a spec, a flag, a config file): the byte tokenizer's
    only size (260 ids), else ``DEFAULT_VOCAB_SIZE``. The one rule for every way a config is
    built: ``TrainConfig`` applies it to a ``vocab_size`` left None."""
    from lm.tokenizers import min_vocab_size  # numpy, no torch: imported when first asked

    return min_vocab_size("byte") if tokenizer == "byte" else DEFAULT_VOCAB_SIZE


def with_default_vocab(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (config fields) with a ``vocab_size`` that is missing or None set by
    ``default_vocab_size`` for their tokenizer (``TrainConfig``'s default one when absent)."""
    if values.get("vocab_size") is not None:
        return values
    tokenizer = values.get("tokenizer", TrainConfig.__dataclass_fields__["tokenizer"].default)
    return {**values, "vocab_size": default_vocab_size(tokenizer)}


#: The longest a cooldown read's decay may be, as a fraction of the tokens trained before it.
#: A read after p tokens trains a branch of c x p tokens (``lm.cooldown``) and stands for a WSD
#: run of p + c x p tokens that decays over its last c x p. At c = 1 that decay is already half
#: of the run it stands for (WSD's decays take 10 to 20%, Hägele et al. 2024; decay_fraction's
#: default 0.2 gives c = 0.25); beyond it the branch trains more tokens than the run had when it
#: branched, so the read measures mostly the branch's own training, not the run at p, and each
#: read costs more than the whole run up to it (c = 1e9 made a read at 10,000 tokens a branch of
#: 1e13, ended only by max_wall_s). At c <= 1 a read costs at most the tokens before it, so no
#: read's branch is longer than the run itself.
MAX_COOLDOWN_FRACTION = 1.0


def check_cooldown_fraction(value: float, key: str = "cooldown_fraction") -> None:
    """A ``FieldError`` naming ``key`` for a cooldown read's decay past
    ``MAX_COOLDOWN_FRACTION`` (a number > 0 is checked before)."""
    if value > MAX_COOLDOWN_FRACTION:
        raise FieldError(
            key,
            f"must be <= {MAX_COOLDOWN_FRACTION:g}, got {key}={value:g}: a "
            f"read after p tokens trains a branch of {key} x p tokens, so past "
            f"{MAX_COOLDOWN_FRACTION:g} it costs more than the run up to it and "
            "measures the branch, not the run; use e.g. 0.25 (a decay over the "
            "last 20% of the run the read stands for)",
        )


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A ``TrainConfig`` field's default as a user sees it: a budget's token count is None in
    the dataclass (another unit may give it) and its default is ``BUDGET_DEFAULTS``'."""
    for quantity, fields in BUDGETS.items():
        if f.name == fields[0]:
            return BUDGET_DEFAULTS[quantity]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _jsonish(value: Any) -> Any:
    """A default as ``to_dict`` writes it (a tuple as a list)."""
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class TrainConfig:
    """One training run: data, model and optimisation, every field a study/CLI knob."""

    corpus: str = field(metadata=_help("Corpus directory written by `sweeps prepare`."))
    tokenizer: Literal["word", "bpe", "byte"] = field(
        default="bpe", metadata=_help("Tokenizer kind: word, bpe or byte.")
    )
    # None follows the tokenizer (``default_vocab_size``: byte 260, else 4096), so a byte config
    # needs no vocab_size and a bpe one gets 4096, however the config is built.
    vocab_size: int | None = field(
        default=None, metadata=_help("Ids the model sees, specials included.")
    )
    lowercase: bool = field(default=False, metadata=_help("Lowercase words (word tokenizer)."))
    d_model: int = field(default=ModelConfig.d_model, metadata=_help("Model width."))
    n_layers: int = field(default=ModelConfig.n_layers, metadata=_help("Transformer blocks."))
    n_heads: int = field(
        default=ModelConfig.n_heads, metadata=_help("Attention heads (must divide d_model).")
    )
    d_ff: int = field(
        default=ModelConfig.d_ff, metadata=_help("Feed-forward width (1 is a legal ablation).")
    )
    seq_len: int = field(default=ModelConfig.seq_len, metadata=_help("Context length in tokens."))
    dropout: float = field(default=ModelConfig.dropout, metadata=_help("Dropout probability."))
    attention: Literal["sdpa", "naive"] = field(
        default=ModelConfig.attention,
        metadata=_help("sdpa (fused) or naive (materializes T x T scores)."),
    )
    checkpointing: bool = field(
        default=ModelConfig.checkpointing, metadata=_help("Activation checkpointing.")
    )
    tie_weights: bool = field(
        default=ModelConfig.tie_weights, metadata=_help("Share embedding and output weights.")
    )
    parametrization: Literal["sp", "mup"] = field(
        default=ModelConfig.parametrization,
        metadata=_help(
            "sp (standard) or mup (µP: init, AdamW rates, attention and readout scaled "
            "by d_model / base_width, so a learning rate tuned narrow transfers wide)."
        ),
    )
    base_width: int = field(
        default=ModelConfig.base_width,
        metadata=_help("mup: the d_model at which µP is exactly sp (its width multiplier is 1)."),
    )
    base_d_head: int | None = field(
        default=ModelConfig.base_d_head,
        metadata=_help(
            "mup: the head width at which the 1/d_head attention scale is sp's "
            "1/sqrt(d_head) (none: the model's own, as when heads scale with width)."
        ),
    )
    batch_size: int = field(default=16, metadata=_help("Micro-batch size in sequences."))
    grad_accum: int = field(default=1, metadata=_help("Micro-batches per optimizer step."))
    lr: float = field(default=1e-3, metadata=_help("Peak learning rate (AdamW)."))
    weight_decay: float = field(default=0.1, metadata=_help("AdamW decay of matrix weights."))
    # The budget and the points that follow it, each in one unit of three (``BUDGETS``): tokens
    # (the default), training text in bytes, or training FLOPs. A field left None takes its
    # default in tokens (``BUDGET_DEFAULTS``) unless another unit gives it; given in bytes or
    # FLOPs, the token count is worked out per trial (``lm.budget.resolve``) and listed in
    # ``derived``. At equal tokens a larger vocabulary sees more text: equal bytes compare
    # vocabularies on the same text, equal FLOPs at the same compute.
    warmup_tokens: int | None = field(
        default=None, metadata=_help("Linear warm-up length in tokens.")
    )
    warmup_bytes: int | None = field(
        default=None, metadata=_help("Warm-up length in bytes of training text.")
    )
    warmup_flops: float | None = field(
        default=None, metadata=_help("Warm-up length in training FLOPs.")
    )
    max_tokens: int | None = field(default=None, metadata=_help("Training budget in tokens."))
    max_bytes: int | None = field(
        default=None,
        metadata=_help(
            "Training budget in bytes of training text (equal text "
            "for every tokenizer and vocabulary)."
        ),
    )
    max_flops: float | None = field(
        default=None,
        metadata=_help(
            "Training budget in training FLOPs (lm.flops; equal compute for every model)."
        ),
    )
    lr_schedule: Literal["cosine", "wsd"] = field(
        default="cosine",
        metadata=_help(
            "After the warm-up: cosine to lr/10, or wsd (warm-up, stable, decay to 0 "
            "over the last decay_fraction of max_tokens)."
        ),
    )
    # 0.2: Hägele et al. (2024) find a cooldown over about 20% of the steps matches a cosine
    # run of the same length.
    decay_fraction: float = field(
        default=0.2, metadata=_help("wsd: the share of max_tokens the final decay takes.")
    )
    # 1-sqrt: in the same paper it gives a lower final loss than a linear decay.
    decay_shape: Literal["linear", "1-sqrt"] = field(
        default="1-sqrt", metadata=_help("wsd: the decay's shape, linear or 1-sqrt.")
    )
    cooldown_reads: tuple[int, ...] = field(
        default=(),
        metadata=_help(
            "wsd: training tokens at which to read the loss a cooldown from there "
            "would reach (a branch, discarded after its evaluation)."
        ),
    )
    # None follows decay_fraction, d / (1 - d) (0.25 at 0.2): a read at p is then a WSD run of
    # p + c tokens whose decay takes the same share as the full runs', so reads and finished
    # trials compare like with like.
    cooldown_fraction: float | None = field(
        default=None,
        metadata=_help(
            "A cooldown read's decay length as a fraction of the tokens trained "
            "before it (none: decay_fraction / (1 - decay_fraction))."
        ),
    )
    max_wall_s: float | None = field(
        default=None, metadata=_help("Optional wall-clock limit in seconds (outcome timeout).")
    )
    precision: Literal["fp32", "bf16", "fp16"] = field(
        default="fp32", metadata=_help("fp32, bf16 (autocast) or fp16 (CUDA, gradient scaler).")
    )
    grad_clip: float = field(default=1.0, metadata=_help("Gradient norm clip (0 turns it off)."))
    seed: int = field(default=0, metadata=_help("Seed of init, batches and samples."))
    eval_every_tokens: int | None = field(
        default=None, metadata=_help("Evaluate every this many training tokens.")
    )
    eval_every_bytes: int | None = field(
        default=None, metadata=_help("Evaluate every this many bytes of training text.")
    )
    eval_every_flops: float | None = field(
        default=None, metadata=_help("Evaluate every this many training FLOPs.")
    )
    eval_tokens: int | None = field(
        default=None, metadata=_help("Size of the fixed validation subset in tokens.")
    )
    eval_bytes: int | None = field(
        default=None,
        metadata=_help(
            "Size of the fixed validation subset in bytes of text "
            "(the same text for every tokenizer)."
        ),
    )
    device: str = field(default="auto", metadata=_help("auto, cpu, cuda or cuda:N."))
    cpu_memory_limit_bytes: int | None = field(
        default=None,
        metadata=_help("CPU runs: bytes the run may allocate beyond its start-up footprint."),
    )
    cuda_memory_limit_bytes: int | None = field(
        default=None,
        metadata=_help(
            "CUDA runs: bytes of the device the run may hold, its context included "
            "(the reservation it was admitted with)."
        ),
    )
    sample_prompts: tuple[str, ...] = field(
        default=("<Q>How do I", "<Q>What is"),
        metadata=_help("Prompts sampled at each evaluation (<Q>, <A>, <D> are markers)."),
    )
    sample_tokens: int = field(default=32, metadata=_help("Tokens generated per sample prompt."))
    # On by default for long runs only: a save (weights and AdamW moments) per 5M tokens costs
    # about 1% of training time on a fast GPU, and runs shorter than that never pay it.
    checkpoint_every_tokens: int | None = field(
        default=5_000_000,
        metadata=_help(
            "Save a resume checkpoint at the first evaluation after every this many "
            "training tokens (none turns it off)."
        ),
    )
    # Set by the tool, not a knob: which token counts were worked out from a budget in bytes or
    # FLOPs, and the training split's bytes per token they were worked out with.
    derived: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "Token fields worked out from bytes or FLOPs (set by the tool).", set_by_tool=True
        ),
    )
    bytes_per_token: float | None = field(
        default=None,
        metadata=_help(
            "Bytes of training text per token the derivation used (set by the tool).",
            set_by_tool=True,
        ),
    )

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus:
            raise SweepsError(f"corpus must be a directory path, got corpus={self.corpus!r}")
        check_choice(self, "tokenizer", TOKENIZERS)
        if self.vocab_size is None:
            object.__setattr__(self, "vocab_size", default_vocab_size(self.tokenizer))
        assert self.vocab_size is not None  # set just above; mypy does not see __setattr__
        check_bool(self, "lowercase")
        _validate_model_fields(self)
        # The tokenizer's own rules (byte has exactly 260 ids, lowercase is word-only, ...);
        # lm.tokenizers needs numpy but no torch.
        from lm.tokenizers import validate_tokenizer_args

        validate_tokenizer_args(self.tokenizer, self.vocab_size, self.lowercase)
        check_int(self, "batch_size", 1)
        check_int(self, "grad_accum", 1)
        check_number(self, "lr", positive=True)
        check_number(self, "weight_decay", minimum=0.0)
        self._validate_budgets()
        self._validate_schedule()
        if self.max_wall_s is not None:
            check_number(self, "max_wall_s", positive=True)
        check_choice(self, "precision", PRECISIONS)
        check_number(self, "grad_clip", minimum=0.0)
        check_int(self, "seed", 0, MAX_SEED)
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise SweepsError(
                f"device must be auto, cpu, cuda or cuda:N, got device={self.device!r}"
            )
        if self.precision == "fp16" and self.device == "cpu":
            raise SweepsError(
                "precision fp16 needs a CUDA device (its gradient scaler is CUDA-only), got "
                "precision='fp16', device='cpu'; use precision bf16 or fp32 on the CPU"
            )
        if self.cpu_memory_limit_bytes is not None:
            check_int(self, "cpu_memory_limit_bytes", 1)
        if self.cuda_memory_limit_bytes is not None:
            check_int(self, "cuda_memory_limit_bytes", 1)
        prompts: object = self.sample_prompts  # as given: a list from JSON or YAML too
        if isinstance(prompts, list):
            prompts = tuple(prompts)
            object.__setattr__(self, "sample_prompts", prompts)
        if not isinstance(prompts, tuple) or not all(isinstance(p, str) for p in prompts):
            raise SweepsError(
                f"sample_prompts must be a list of strings, got sample_prompts={prompts!r}"
            )
        check_int(self, "sample_tokens", 0)
        if self.checkpoint_every_tokens is not None:
            check_int(self, "checkpoint_every_tokens", 1)

    def _validate_budgets(self) -> None:
        """Each budget quantity in one unit (``BUDGETS``); its token count defaulted, given, or
        ``derived`` from the unit that governs it. An unresolved config (a count in bytes or
        FLOPs, its tokens not worked out yet) is valid: ``lm.budget.resolve`` completes it."""
        derived: object = self.derived  # as given: a list from JSON or YAML too
        if isinstance(derived, list):
            derived = tuple(derived)
            object.__setattr__(self, "derived", derived)
        token_fields = [fields[0] for fields in BUDGETS.values()]
        if not isinstance(derived, tuple) or any(d not in token_fields for d in derived):
            raise SweepsError(
                f"derived must list token fields ({', '.join(token_fields)}), got "
                f"derived={derived!r}"
            )
        for quantity, fields in BUDGETS.items():
            names = [f for f in fields if f is not None]
            given = [f for f in names if getattr(self, f) is not None and f not in derived]
            if len(given) > 1:
                shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in given)
                raise SweepsError(
                    f"give one of {', '.join(names)}, got {shown}: exactly one "
                    "unit governs each budget (the others are worked out)"
                )
            for name in given:
                minimum = BUDGET_MINIMUMS[quantity]
                if name.endswith("_flops"):
                    check_number(self, name, positive=minimum > 0, minimum=0.0)
                else:
                    check_int(self, name, minimum)
            tokens = fields[0]
            if tokens in derived:
                if not given:
                    raise SweepsError(
                        f"derived lists {tokens}, but no "
                        f"{' or '.join(names[1:])} is given to derive it from"
                    )
                check_int(self, tokens, BUDGET_MINIMUMS[quantity])
            elif not given:
                object.__setattr__(self, tokens, BUDGET_DEFAULTS[quantity])
        if self.bytes_per_token is not None:
            check_number(self, "bytes_per_token", positive=True)

    @property
    def resolved(self) -> bool:
        """Whether every budget has its token count (``lm.budget.resolve`` gives them)."""
        return all(getattr(self, fields[0]) is not None for fields in BUDGETS.values())

    def budget_unit(self, quantity: str = "max") -> str:
        """The unit that governs ``quantity`` (``BUDGETS``): tokens, bytes or flops."""
        fields = BUDGETS[quantity]
        for unit, name in zip(BUDGET_UNITS, fields, strict=True):
            if name is not None and getattr(self, name) is not None and name not in self.derived:
                return unit
        return "tokens"

    def _validate_schedule(self) -> None:
        check_choice(self, "lr_schedule", LR_SCHEDULES)
        check_number(self, "decay_fraction", positive=True, below=1.0)
        check_choice(self, "decay_shape", DECAY_SHAPES)
        if self.cooldown_fraction is not None:
            check_number(self, "cooldown_fraction", positive=True)
            check_cooldown_fraction(self.cooldown_fraction)
        reads: object = self.cooldown_reads  # as given: a list from JSON or YAML too
        if isinstance(reads, list):
            reads = tuple(reads)
            object.__setattr__(self, "cooldown_reads", reads)
        if not isinstance(reads, tuple):
            raise SweepsError(
                f"cooldown_reads must be a list of token counts, got cooldown_reads={reads!r}"
            )
        for i, tokens in enumerate(reads):
            require_int(tokens, "cooldown_reads", 1)
            # The run's own end is cooled down already.
            if self.max_tokens is not None and tokens >= self.max_tokens:
                raise SweepsError(
                    f"cooldown_reads must be below max_tokens={self.max_tokens:,}"
                    f", got cooldown_reads={list(reads)!r}"
                )
            if i and tokens <= reads[i - 1]:
                raise SweepsError(
                    f"cooldown_reads must be increasing, got cooldown_reads={list(reads)!r}"
                )
        if reads and self.max_tokens is not None:
            # A read is taken at the first step boundary at or past its point (lm.schedule): one
            # whose boundary is the run's end never happens (the run's own decay is its read).
            step = self.tokens_per_step
            last = max(reads)
            if -(-last // step) * step >= self.max_tokens:
                raise SweepsError(
                    f"cooldown_reads {last:,} falls in the last optimizer step (reads are taken "
                    f"at a step boundary, every {step:,} tokens; the next is at or past "
                    f"max_tokens={self.max_tokens:,}), so it would never be taken; use points "
                    f"below {(-(-self.max_tokens // step) - 1) * step:,}"
                )
        if reads and self.lr_schedule != "wsd":
            # A cosine run's rate at a read point is still high and falls by its own budget:
            # no decay from there is a run of any length the schedule knows.
            raise SweepsError(
                f"cooldown_reads needs lr_schedule='wsd', got lr_schedule="
                f"{self.lr_schedule!r} with cooldown_reads={list(reads)!r}"
            )
        if reads and self.read_cooldown_fraction > MAX_COOLDOWN_FRACTION:
            # cooldown_fraction is None here: the reads' decay follows decay_fraction.
            d = self.decay_fraction
            raise FieldError(
                "decay_fraction",
                f"{d:g} with cooldown_reads makes each read decay "
                f"over {d / (1 - d):.3g} x the tokens before it (cooldown_fraction "
                f"follows decay_fraction: d / (1 - d)), more than "
                f"{MAX_COOLDOWN_FRACTION:g}; set cooldown_fraction (e.g. 0.25) or "
                "decay_fraction <= 0.5",
            )

    @property
    def read_cooldown_fraction(self) -> float:
        """``cooldown_fraction``, or the one that follows ``decay_fraction`` when it is None."""
        if self.cooldown_fraction is not None:
            return self.cooldown_fraction
        return self.decay_fraction / (1.0 - self.decay_fraction)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """A config from JSON/TOML/CLI values; an unknown key is named (a typo is not ignored)."""
        if not isinstance(values, dict):
            raise SweepsError(f"a training config must be a table of fields, got {values!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            hint = closest(unknown[0], known)
            raise SweepsError(
                f"unknown config field {unknown[0]!r}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; known fields: {', '.join(sorted(known))}"
            )
        if "corpus" not in values:
            raise SweepsError("corpus is missing; give the corpus directory from `sweeps prepare`")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (``from_dict(to_dict())`` gives the same config)."""
        out = dataclasses.asdict(self)
        out["sample_prompts"] = list(self.sample_prompts)
        out["cooldown_reads"] = list(self.cooldown_reads)
        out["derived"] = list(self.derived)
        return out

    def model_config(self, vocab_size: int | None = None) -> ModelConfig:
        """The model part; ``vocab_size`` overrides when the tokenizer's real size differs."""
        values = {name: getattr(self, name) for name in _MODEL_FIELDS}
        if vocab_size is not None:
            values["vocab_size"] = vocab_size
        return ModelConfig(**values)

    def fingerprint(self) -> str:
        """Hash of the fields that decide what the weights mean (data, tokenizer, model shape)."""
        identity = {name: getattr(self, name) for name in _IDENTITY_FIELDS if self._computes(name)}
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def computation(self) -> dict[str, Any]:
        """The fields that decide what training computes, JSON-ready: a run resumes only from a
        checkpoint of a config with the same ones (``resume_fingerprint``)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {
            k: v
            for k, v in self.to_dict().items()
            if k not in _PLACEMENT_FIELDS
            and self._computes(k)
            and not (k in (*SCHEDULE_FIELDS, *BUDGET_EXTRA_FIELDS) and v == _jsonish(defaults[k]))
        }

    def _computes(self, name: str) -> bool:
        """False for a µP field of an sp run (``PARAMETRIZATION_FIELDS``)."""
        return self.parametrization == "mup" or name not in PARAMETRIZATION_FIELDS

    def resume_fingerprint(self) -> str:
        """Hash of ``computation()``: continuing a checkpoint of this hash is the same run."""
        blob = json.dumps(self.computation(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    @property
    def tokens_per_step(self) -> int:
        """Training tokens (targets) per optimizer step."""
        return self.batch_size * self.grad_accum * self.seq_len

    # The defaults stay fixed token counts, not fractions of max_tokens: a study that searches
    # max_tokens (or an IsoFLOP grid, whose cells differ mostly in it) then compares trials whose
    # warm-up ends and whose evaluations fall at the same tokens, so learning curves and
    # successive-halving rungs line up across budgets; a default that followed the budget would
    # move both with it, unseen. A short budget gets a warning naming the value to set instead.
    def budget_warnings(self) -> list[str]:
        """What is valid but cannot work within ``max_tokens`` (said before a run by ``sweeps
        train``, ``estimate`` and ``run --dry-run``; not an error: a smoke test may mean it)."""
        out: list[str] = []
        if not self.resolved:
            return out  # said once its tokens are worked out (``lm.budget.resolve``)
        assert self.max_tokens is not None and self.eval_every_tokens is not None  # resolved
        assert self.warmup_tokens is not None  # resolved
        if self.warmup_tokens >= self.max_tokens:
            out.append(
                f"warmup_tokens {self.warmup_tokens:,} >= max_tokens "
                f"{self.max_tokens:,}: the whole run is warm-up, so the learning rate "
                "never reaches lr and never decays; set warmup_tokens below max_tokens "
                f"(e.g. {max(self.max_tokens // 10, 0):,})"
            )
        if self.eval_every_tokens >= self.max_tokens:
            out.append(
                f"eval_every_tokens {self.eval_every_tokens:,} >= max_tokens "
                f"{self.max_tokens:,}: only the final evaluation runs (no learning "
                "curve; the pruners and the collapse verdicts get one look, at the "
                "end); set eval_every_tokens below max_tokens "
                f"(e.g. {max(self.max_tokens // 4, 1):,})"
            )
        return out
