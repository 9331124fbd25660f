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
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from lm.checks import check_bool, check_choice, check_int, check_number, require_int
from lm.errors import SweepsError, closest

TOKENIZERS = ("word", "bpe", "byte")
ATTENTIONS = ("sdpa", "naive")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCHEDULES = ("cosine", "wsd")
DECAY_SHAPES = ("linear", "1-sqrt")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
#: The largest seed torch's generators take (an unsigned 64-bit integer).
MAX_SEED = 2**64 - 1


def _help(text: str) -> Any:
    """Field metadata read by the CLI (``sweeps.cli.options``) for each generated flag."""
    return {"help": text}


# --- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    """A GPT decoder's shape: everything ``lm.model.GPT`` needs and nothing about training."""

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

    def __post_init__(self) -> None:
        _validate_model_fields(self)


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
#: Fields that only place or bound a run, not what it computes: a resume checkpoint fits a config
#: that agrees on every other field (a preempted trial may come back on another node, device or
#: memory budget, with a longer wall-clock limit).
_PLACEMENT_FIELDS = ("device", "cpu_memory_limit_bytes", "cuda_memory_limit_bytes", "max_wall_s",
                     "checkpoint_every_tokens")

#: The learning-rate schedule and its cooldown reads (``lm.schedule``, ``lm.cooldown``), recorded
#: in resume checkpoints. Added after resume checkpoints were first written: at their defaults
#: they compute what a run computed before they existed, so ``computation()`` leaves them out
#: there and such a checkpoint (or a re-queued trial's) still continues.
SCHEDULE_FIELDS = ("lr_schedule", "decay_fraction", "decay_shape", "cooldown_reads",
                   "cooldown_fraction")


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
    vocab_size: int = field(default=4096, metadata=_help("Ids the model sees, specials included."))
    lowercase: bool = field(default=False, metadata=_help("Lowercase words (word tokenizer)."))
    d_model: int = field(default=128, metadata=_help("Model width."))
    n_layers: int = field(default=2, metadata=_help("Transformer blocks."))
    n_heads: int = field(default=4, metadata=_help("Attention heads (must divide d_model)."))
    d_ff: int = field(default=512, metadata=_help("Feed-forward width (1 is a legal ablation)."))
    seq_len: int = field(default=128, metadata=_help("Context length in tokens."))
    dropout: float = field(default=0.0, metadata=_help("Dropout probability."))
    attention: Literal["sdpa", "naive"] = field(
        default="sdpa", metadata=_help("sdpa (fused) or naive (materializes T x T scores).")
    )
    checkpointing: bool = field(default=False, metadata=_help("Activation checkpointing."))
    tie_weights: bool = field(default=True, metadata=_help("Share embedding and output weights."))
    batch_size: int = field(default=16, metadata=_help("Micro-batch size in sequences."))
    grad_accum: int = field(default=1, metadata=_help("Micro-batches per optimizer step."))
    lr: float = field(default=1e-3, metadata=_help("Peak learning rate (AdamW)."))
    weight_decay: float = field(default=0.1, metadata=_help("AdamW decay of matrix weights."))
    warmup_tokens: int = field(default=50_000, metadata=_help("Linear warm-up length in tokens."))
    max_tokens: int = field(default=1_000_000, metadata=_help("Training budget in tokens."))
    lr_schedule: Literal["cosine", "wsd"] = field(
        default="cosine",
        metadata=_help("After the warm-up: cosine to lr/10, or wsd (warm-up, stable, decay to 0 "
                       "over the last decay_fraction of max_tokens)."),
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
        metadata=_help("wsd: training tokens at which to read the loss a cooldown from there "
                       "would reach (a branch, discarded after its evaluation)."),
    )
    # None follows decay_fraction, d / (1 - d) (0.25 at 0.2): a read at p is then a WSD run of
    # p + c tokens whose decay takes the same share as the full runs', so reads and finished
    # trials compare like with like.
    cooldown_fraction: float | None = field(
        default=None,
        metadata=_help("A cooldown read's decay length as a fraction of the tokens trained "
                       "before it (none: decay_fraction / (1 - decay_fraction))."),
    )
    max_wall_s: float | None = field(
        default=None, metadata=_help("Optional wall-clock limit in seconds (outcome timeout).")
    )
    precision: Literal["fp32", "bf16", "fp16"] = field(
        default="fp32", metadata=_help("fp32, bf16 (autocast) or fp16 (CUDA, gradient scaler).")
    )
    grad_clip: float = field(default=1.0, metadata=_help("Gradient norm clip (0 turns it off)."))
    seed: int = field(default=0, metadata=_help("Seed of init, batches and samples."))
    eval_every_tokens: int = field(
        default=250_000, metadata=_help("Evaluate every this many training tokens.")
    )
    eval_tokens: int = field(
        default=32_768, metadata=_help("Size of the fixed validation subset in tokens.")
    )
    device: str = field(default="auto", metadata=_help("auto, cpu, cuda or cuda:N."))
    cpu_memory_limit_bytes: int | None = field(
        default=None,
        metadata=_help("CPU runs: bytes the run may allocate beyond its start-up footprint."),
    )
    cuda_memory_limit_bytes: int | None = field(
        default=None,
        metadata=_help("CUDA runs: bytes of the device the run may hold, its context included "
                       "(the reservation it was admitted with)."),
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
        metadata=_help("Save a resume checkpoint at the first evaluation after every this many "
                       "training tokens (none turns it off)."),
    )

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus:
            raise SweepsError(f"corpus must be a directory path, got corpus={self.corpus!r}")
        check_choice(self, "tokenizer", TOKENIZERS)
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
        check_int(self, "warmup_tokens", 0)
        check_int(self, "max_tokens", 1)
        self._validate_schedule()
        if self.max_wall_s is not None:
            check_number(self, "max_wall_s", positive=True)
        check_choice(self, "precision", PRECISIONS)
        check_number(self, "grad_clip", minimum=0.0)
        check_int(self, "seed", 0, MAX_SEED)
        check_int(self, "eval_every_tokens", 1)
        check_int(self, "eval_tokens", 2)
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
        prompts = self.sample_prompts
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

    def _validate_schedule(self) -> None:
        check_choice(self, "lr_schedule", LR_SCHEDULES)
        check_number(self, "decay_fraction", positive=True, below=1.0)
        check_choice(self, "decay_shape", DECAY_SHAPES)
        if self.cooldown_fraction is not None:
            check_number(self, "cooldown_fraction", positive=True)
        reads = self.cooldown_reads
        if isinstance(reads, list):
            reads = tuple(reads)
            object.__setattr__(self, "cooldown_reads", reads)
        if not isinstance(reads, tuple):
            raise SweepsError(f"cooldown_reads must be a list of token counts, got "
                              f"cooldown_reads={reads!r}")
        for i, tokens in enumerate(reads):
            require_int(tokens, "cooldown_reads", 1)
            if tokens >= self.max_tokens:  # the run's own end is cooled down already
                raise SweepsError(f"cooldown_reads must be below max_tokens={self.max_tokens:,}"
                                  f", got cooldown_reads={list(reads)!r}")
            if i and tokens <= reads[i - 1]:
                raise SweepsError(f"cooldown_reads must be increasing, got "
                                  f"cooldown_reads={list(reads)!r}")
        if reads and self.lr_schedule != "wsd":
            # A cosine run's rate at a read point is still high and falls by its own budget:
            # no decay from there is a run of any length the schedule knows.
            raise SweepsError(f"cooldown_reads needs lr_schedule='wsd', got lr_schedule="
                              f"{self.lr_schedule!r} with cooldown_reads={list(reads)!r}")

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
        return out

    def model_config(self, vocab_size: int | None = None) -> ModelConfig:
        """The model part; ``vocab_size`` overrides when the tokenizer's real size differs."""
        values = {name: getattr(self, name) for name in _MODEL_FIELDS}
        if vocab_size is not None:
            values["vocab_size"] = vocab_size
        return ModelConfig(**values)

    def fingerprint(self) -> str:
        """Hash of the fields that decide what the weights mean (data, tokenizer, model shape)."""
        identity = {name: getattr(self, name) for name in _IDENTITY_FIELDS}
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def computation(self) -> dict[str, Any]:
        """The fields that decide what training computes, JSON-ready: a run resumes only from a
        checkpoint of a config with the same ones (``resume_fingerprint``)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {k: v for k, v in self.to_dict().items() if k not in _PLACEMENT_FIELDS
                and not (k in SCHEDULE_FIELDS and v == _jsonish(defaults[k]))}

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
        out = []
        if self.warmup_tokens >= self.max_tokens:
            out.append(f"warmup_tokens {self.warmup_tokens:,} >= max_tokens "
                       f"{self.max_tokens:,}: the whole run is warm-up, so the learning rate "
                       "never reaches lr and never decays; set warmup_tokens below max_tokens "
                       f"(e.g. {max(self.max_tokens // 10, 0):,})")
        if self.eval_every_tokens >= self.max_tokens:
            out.append(f"eval_every_tokens {self.eval_every_tokens:,} >= max_tokens "
                       f"{self.max_tokens:,}: only the final evaluation runs (no learning "
                       "curve; the pruners and the collapse verdicts get one look, at the "
                       "end); set eval_every_tokens below max_tokens "
                       f"(e.g. {max(self.max_tokens // 4, 1):,})")
        return out
