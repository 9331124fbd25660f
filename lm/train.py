"""One training run, end to end: ``run(cfg, run_dir) -> RunResult``; the trial child's entry.

``python -m lm.train RUN_DIR`` reads ``RUN_DIR/config.json`` and calls ``run``; that is what
every sweep trial executes. Files in ``run_dir`` (the contract with the orchestrator, which reads
files and never parses log text):

- ``config.json``: the full ``TrainConfig`` (every field, defaults included).
- ``tokenizer.json``: the run's tokenizer, so ``generate`` needs nothing but the run dir.
- ``metrics.jsonl``: one JSON object per evaluation (keys: ``METRIC_KEYS``), flushed as written.
- ``best.pt``: weights only (``torch.load(..., weights_only=True)``) of the best evaluation:
  ``{"state_dict", "fingerprint", "model_config", "tokens", "val_bpb"}``.
- ``result.json``: the ``RunResult``, written atomically (temp file + ``os.replace``) at the end
  whatever the outcome: complete, oom, diverged, timeout, interrupted (SIGTERM/SIGINT) or crashed.
  Exit codes are in ``lm/outcomes.py``. Bad input (a ``SweepsError`` while checking the config,
  corpus, token cache or device) writes nothing and exits 2.

Non-finite floats are written as ``null`` so every file is strict JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lm import metrics, outcomes
from lm.config import ModelConfig, TrainConfig, param_breakdown
from lm.errors import SweepsError
from lm.files import write_json_atomic
from lm.model import GPT
from lm.serialization import prompt_to_marked

Progress = Callable[[int, int], None]
OnEval = Callable[[dict[str, Any]], None]

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
CHECKPOINT_FILE = "best.pt"

#: Keys of each ``metrics.jsonl`` object, in order.
METRIC_KEYS = (
    "step",
    "tokens",
    "lr",
    "train_loss",
    "val_loss",
    "val_bpb",
    "accuracy",
    "unigram_entropy",
    "unigram_bpb",
    "unigram_gap",
    "kl_mean_to_unigram",
    "mean_kl_to_mean",
    "top20_overlap",
    "top_tokens",
    "unk_rate_targets",
    "unk_rate_samples",
    "samples",
    "peak_mem_bytes",
    "tokens_per_s",
    "elapsed_s",
)

#: The cosine schedule decays to this fraction of ``lr`` at ``max_tokens``.
MIN_LR_FRACTION = 0.1
#: Sampling of the evaluation samples (seeded with ``cfg.seed``, so runs are comparable).
EVAL_SAMPLE_TEMPERATURE = 0.8
EVAL_SAMPLE_TOP_K = 50


# --- the result --------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What ``result.json`` holds; ``exit_code`` is the child's (``lm/outcomes.py``)."""

    outcome: str
    reason: str
    exit_code: int
    tokens_seen: int = 0
    steps: int = 0
    wall_s: float = 0.0
    tokens_per_s: float = 0.0
    peak_mem_bytes: int = 0
    params: dict[str, int] = field(default_factory=dict)
    final_metrics: dict[str, Any] | None = None
    best_val_bpb: float | None = None
    best_tokens: int | None = None
    n_evals: int = 0
    vocab_size: int | None = None
    unigram_entropy: float | None = None
    unigram_bpb: float | None = None
    unk_rate: float | None = None
    bytes_per_token: float | None = None
    device: str = ""
    fingerprint: str = ""
    traceback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _finite(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunResult:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def read_result(run_dir: Path) -> RunResult:
    """The ``result.json`` of a finished run."""
    path = Path(run_dir) / RESULT_FILE
    try:
        return RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise SweepsError(f"{path} does not exist; the run has not finished") from None
    except (json.JSONDecodeError, TypeError) as exc:
        raise SweepsError(f"{path} is not a valid result file: {exc}") from None


def read_config(run_dir: Path) -> TrainConfig:
    """``run_dir/config.json`` as a ``TrainConfig`` (``SweepsError`` if missing or invalid)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise SweepsError(f"{path} does not exist; give a run directory holding a config.json")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SweepsError(f"{path} is not valid JSON ({exc}); rewrite it") from None
    try:
        return TrainConfig.from_dict(values)
    except SweepsError as exc:
        raise SweepsError(f"{path}: {exc}") from None


# --- files -------------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """``value`` with NaN/inf floats replaced by None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# --- device, precision, memory, signals --------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when present, else the CPU; a CUDA device that is not there is bad input."""
    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", torch.cuda.current_device())
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SweepsError(f"device={name!r} but CUDA is not available; use device auto or cpu")
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise SweepsError(
                f"device={name!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
        # An explicit index: torch.cuda.set_device and the memory statistics need one.
        return torch.device("cuda", index)
    return torch.device(name)


def cpu_threads() -> int:
    """Threads for a CPU run: ``SWEEPS_NUM_THREADS`` (set by the orchestrator) or every core."""
    env = os.environ.get("SWEEPS_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise SweepsError(
                f"SWEEPS_NUM_THREADS must be a positive integer, got {env!r}"
            ) from None
        if n < 1:
            raise SweepsError(f"SWEEPS_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _autocast(device: torch.device, precision: str) -> Callable[[], AbstractContextManager]:
    if precision == "fp32":
        return nullcontext
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: peak allocated by tensors; CPU: the process's peak anonymous resident set (file-
    backed pages vary with the page cache and are not what the limit enforces: ``lm.rss``)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    from lm.rss import peak_anon_bytes

    return peak_anon_bytes()


def _vm_data_bytes() -> int | None:
    """The process's data segment size (what RLIMIT_DATA limits), from /proc on Linux."""
    from lm.rss import status_bytes

    return status_bytes("VmData").get("VmData")


@contextmanager
def cpu_memory_limit(limit_bytes: int | None) -> Iterator[int | None]:
    """Limit what the process may allocate from here on to ``limit_bytes`` (RELATIVE).

    The soft RLIMIT_DATA is set to the current data size (torch imported, its thread pool
    started, tokens memory-mapped: file mappings do not count) plus ``limit_bytes``, so an
    allocation beyond it fails inside the process (``MemoryError`` or torch's "can't allocate
    memory" ``RuntimeError``: outcome ``oom``) instead of the kernel's OOM killer ending it with
    SIGKILL. Relative, because the start-up footprint is mostly virtual reservations unrelated
    to the memory the model will use. The previous soft limit is restored on exit (the hard
    limit is never touched, so an in-process run leaves the process as it found it).
    """
    base = _vm_data_bytes() if limit_bytes is not None else None
    if limit_bytes is None or base is None:
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    new = base + limit_bytes
    if hard != resource.RLIM_INFINITY:
        new = min(new, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (new, hard))
    try:
        yield new
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


class RunInterrupted(BaseException):
    """Raised by the SIGTERM handler. A BaseException, so no library's ``except Exception``
    swallows it on its way to ``run``."""


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """Turn SIGTERM into ``RunInterrupted`` (once: a second signal while the result is being
    written is ignored). Only the main thread can install handlers; elsewhere this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        raise RunInterrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return any(
            s in msg
            for s in (
                "can't allocate memory",
                "cannot allocate memory",
                "out of memory",
                "failed to allocate",
            )
        )
    return False


# --- data --------------------------------------------------------------------------------------


class BatchSampler:
    """Random windows of ``seq_len + 1`` tokens from a token memmap, from a seeded generator."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int) -> None:
        if len(tokens) < seq_len + 1:
            raise SweepsError(
                f"the training split has {len(tokens)} tokens, fewer than seq_len + 1 = "
                f"{seq_len + 1}; use a smaller seq_len or a bigger corpus"
            )
        self.tokens = tokens
        self.batch_size = batch_size
        self.offsets = np.arange(seq_len + 1)
        self.high = len(tokens) - seq_len  # last start: len - seq_len - 1
        self.rng = np.random.default_rng(seed)

    def next(self) -> torch.Tensor:
        """(B, T + 1) int64 ids."""
        starts = self.rng.integers(0, self.high, size=self.batch_size)
        return torch.from_numpy(self.tokens[starts[:, None] + self.offsets].astype(np.int64))


def eval_windows(
    val: np.ndarray, val_nbytes: np.ndarray, seq_len: int, eval_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed validation subset: the first ``eval_tokens`` targets of the split, cut into
    consecutive windows -> ids (N, T + 1) and the bytes each target stands for (N, T)."""
    available = (len(val) - 1) // seq_len
    if available < 1:
        raise SweepsError(
            f"the validation split has {len(val)} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
            "use a smaller seq_len or a bigger val_fraction"
        )
    n = min(max(1, eval_tokens // seq_len), available)
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)  # (N, T + 1)
    ids = torch.from_numpy(np.asarray(val[idx], dtype=np.int64))
    nbytes = torch.from_numpy(np.asarray(val_nbytes[idx[:, 1:]], dtype=np.int64))  # targets'
    return ids, nbytes


# --- the objective -----------------------------------------------------------------------------


def lm_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of a (B, T + 1) window batch: target i is input i + 1."""
    x, y = batch[:, :-1], batch[:, 1:]  # (B, T) each: the one-position shift
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def accumulate_gradients(
    model: torch.nn.Module,
    micro_batches: Sequence[torch.Tensor],
    *,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    scaler: Any = None,
) -> torch.Tensor:
    """Backward over the micro-batches; returns the mean loss (a detached scalar tensor).

    Each micro-batch's mean loss is divided by their number: the micro-batches are equal-sized,
    so the accumulated gradient is the gradient of the full batch's mean loss.
    """
    n = len(micro_batches)
    total = torch.zeros((), device=micro_batches[0].device)
    for batch in micro_batches:
        with autocast():
            loss = lm_loss(model, batch)
        scaled = loss / n
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss.detach()
    return total / n


def lr_at(tokens: int, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup_tokens``, then cosine to ``MIN_LR_FRACTION * lr``."""
    if tokens < cfg.warmup_tokens:
        return cfg.lr * (tokens + cfg.tokens_per_step) / (cfg.warmup_tokens + cfg.tokens_per_step)
    span = max(cfg.max_tokens - cfg.warmup_tokens, 1)
    progress = min((tokens - cfg.warmup_tokens) / span, 1.0)
    low = cfg.lr * MIN_LR_FRACTION
    return low + 0.5 * (cfg.lr - low) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(
    model: torch.nn.Module, cfg: TrainConfig, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not biases, norms or embeddings)."""
    decay, no_decay = [], []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen:  # a tied head is the embedding
            continue
        seen.add(id(p))
        is_embedding = name.startswith(("wte.", "wpe."))
        (decay if p.dim() >= 2 and not is_embedding else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(0.9, 0.95), fused=device.type == "cuda" or None
    )


# --- evaluation and sampling -------------------------------------------------------------------


@torch.no_grad()
def sample_tokens(
    model: GPT,
    ids: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
    device: torch.device,
) -> list[int]:
    """Continue ``ids`` by ``max_new_tokens`` ids (temperature 0: greedy)."""
    was_training = model.training
    model.eval()
    x = torch.tensor([list(ids)], dtype=torch.long, device=device)  # (1, t)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(x[:, -model.cfg.seq_len :])[:, -1, :].float()  # (1, V)
        if temperature == 0:
            nxt = int(logits.argmax(-1))
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.size(-1):
                kth = torch.topk(logits, top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1).cpu()  # sample on the CPU: one seeded stream
            nxt = int(torch.multinomial(probs, 1, generator=generator))
        new.append(nxt)
        x = torch.cat([x, torch.tensor([[nxt]], device=device)], dim=1)
    model.train(was_training)
    return new


def _prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    ids, _ = tokenizer.encode_marked(prompt_to_marked(prompt))
    ids = [int(i) for i in ids]
    # An empty prompt starts a new document, as after a <D> in the corpus.
    return ids or [int(tokenizer.special_ids["<D>"])]


@torch.no_grad()
def evaluate(
    model: GPT,
    windows: torch.Tensor,
    nbytes: torch.Tensor,
    *,
    batch_size: int,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
    unk_id: int | None,
    unigram: torch.Tensor,
    token_strings: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Loss, bits per byte, accuracy and collapse statistics on fixed windows (eval mode); with
    ``token_strings``, also ``top_tokens`` (the collapse chart's corpus-vs-model frequencies)."""
    model.eval()
    nll_sum, bits, n_bytes, correct, n, unk = 0.0, 0.0, 0, 0, 0, 0
    collapse = metrics.CollapseStats(model.cfg.vocab_size)
    for i in range(0, len(windows), batch_size):
        batch = windows[i : i + batch_size].to(device)
        x, y = batch[:, :-1], batch[:, 1:]  # (b, T)
        with autocast():
            logits = model(x)
        logits = logits.float().reshape(-1, logits.size(-1))  # (b*T, V)
        y = y.reshape(-1)
        nll = F.cross_entropy(logits, y, reduction="none")  # (b*T,)
        b, nb = metrics.bpb_terms(nll.cpu(), y.cpu(), nbytes[i : i + batch_size], unk_id)
        bits += b
        n_bytes += nb
        nll_sum += float(nll.double().sum())
        correct += int((logits.argmax(-1) == y).sum())
        n += y.numel()
        if unk_id is not None:
            unk += int((y == unk_id).sum())
        collapse.update(logits)
    model.train()
    out: dict[str, Any] = {
        "val_loss": nll_sum / n,
        "val_bpb": bits / n_bytes if n_bytes else float("nan"),
        "accuracy": correct / n,
        **collapse.result(unigram),
        "unk_rate_targets": unk / n,
    }
    if token_strings is not None:
        out["top_tokens"] = metrics.top_tokens(collapse.mean(), unigram, token_strings)
    return out


# --- the run -----------------------------------------------------------------------------------


class _Diverged(Exception):
    pass


@dataclass
class _Setup:
    """Everything checked before a single file is written (bad input raises ``SweepsError``)."""

    device: torch.device
    threads: int | None
    cache: Any
    windows: torch.Tensor
    window_nbytes: torch.Tensor
    model_cfg: ModelConfig


def _setup(cfg: TrainConfig) -> _Setup:
    from lm.corpus import load_manifest
    from lm.tokens import load_tokens

    device = resolve_device(cfg.device)
    if cfg.precision == "fp16" and device.type != "cuda":
        raise SweepsError(
            f"precision fp16 needs a CUDA device, but device={cfg.device!r} resolved to the CPU; "
            "use precision bf16 or fp32"
        )
    if cfg.precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SweepsError(f"precision bf16 is not supported by {device}; use fp16 or fp32")
    corpus = Path(cfg.corpus)
    load_manifest(corpus)
    cache = load_tokens(corpus, cfg.tokenizer, cfg.vocab_size, lowercase=cfg.lowercase)
    windows, window_nbytes = eval_windows(cache.val, cache.val_nbytes, cfg.seq_len, cfg.eval_tokens)
    if len(cache.train) < cfg.seq_len + 1:
        raise SweepsError(
            f"the training split has {len(cache.train)} tokens, fewer than seq_len + 1 = "
            f"{cfg.seq_len + 1}; use a smaller seq_len or a bigger corpus"
        )
    model_cfg = cfg.model_config(vocab_size=int(cache.tokenizer.vocab_size))
    threads = cpu_threads() if device.type == "cpu" else None
    return _Setup(device, threads, cache, windows, window_nbytes, model_cfg)


def run(
    cfg: TrainConfig,
    run_dir: Path,
    *,
    progress: Progress | None = None,
    on_eval: OnEval | None = None,
) -> RunResult:
    """Train ``cfg`` into ``run_dir`` and return (and write) its ``RunResult``.

    Raises ``SweepsError`` only for bad input, before anything is written; every other ending
    (including out-of-memory, SIGTERM and bugs) is a ``RunResult`` in ``result.json``.
    """
    run_dir = Path(run_dir)
    started = time.monotonic()
    with _signals_interrupt():
        state = _RunState(cfg, run_dir, started)
        try:
            setup = _setup(cfg)
        except SweepsError:
            raise  # bad input: nothing written
        except BaseException as exc:
            return _ending(state, exc)
        try:
            state.begin(setup)
            limit_bytes = cfg.cpu_memory_limit_bytes if setup.device.type == "cpu" else None
            with cpu_memory_limit(limit_bytes) as limit:
                state.memory_limit = limit
                outcome, reason = state.train(progress, on_eval)
            return state.finish(outcome, reason)
        except BaseException as exc:  # every ending gets a result.json
            return _ending(state, exc)


def _ending(state: _RunState, exc: BaseException) -> RunResult:
    """The result of a run that ended with ``exc`` (re-raised only for SystemExit)."""
    if isinstance(exc, (SystemExit, GeneratorExit)):
        raise exc
    if isinstance(exc, (RunInterrupted, KeyboardInterrupt)):
        name = str(exc) or "SIGINT"
        return state.finish(outcomes.INTERRUPTED, f"{name} at {state.where()}")
    if isinstance(exc, _Diverged):
        return state.finish(outcomes.DIVERGED, str(exc))
    if _is_oom(exc):
        state.release_memory()
        lines = str(exc).strip().splitlines()
        first = f"{type(exc).__name__}" + (f": {lines[0][:300]}" if lines else "")
        limit = (
            f" (cpu_memory_limit_bytes={state.cfg.cpu_memory_limit_bytes:,})"
            if state.memory_limit is not None
            else ""
        )
        return state.finish(outcomes.OOM, f"out of memory at {state.where()}{limit}: {first}")
    tb = "".join(traceback.format_exception(exc))
    print(tb, file=sys.stderr)
    return state.finish(outcomes.CRASHED, f"{type(exc).__name__}: {exc}", tb)


def _warm_up(device: torch.device, cfg: TrainConfig) -> None:
    """One throwaway step of a tiny model, before the memory limit is measured and set.

    It starts the intra-op thread pool and makes torch import what it imports lazily (AdamW
    pulls in torch._dynamo, tens of MB), so the limit's baseline holds them and
    ``cpu_memory_limit_bytes`` is left for the model itself.
    """
    tiny = ModelConfig(
        vocab_size=8,
        d_model=8,
        n_layers=1,
        n_heads=1,
        d_ff=8,
        seq_len=4,
        attention=cfg.attention,
        checkpointing=cfg.checkpointing,
    )
    model = GPT(tiny).to(device)
    optimizer = make_optimizer(model, cfg, device)
    batch = torch.zeros(2, 5, dtype=torch.long, device=device)
    accumulate_gradients(model, [batch], autocast=_autocast(device, cfg.precision))
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    with torch.no_grad():
        model.eval()
        model(batch[:, :4])


class _RunState:
    """The mutable state of one run, so any ending can report what was reached."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, started: float) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.started = started
        self.setup: _Setup | None = None
        self.model: GPT | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.memory_limit: int | None = None
        self.step = 0
        self.tokens = 0
        self.train_s = 0.0
        self.n_evals = 0
        self.last_metrics: dict[str, Any] | None = None
        self.best_val_bpb: float | None = None
        self.best_tokens: int | None = None
        self.unigram_entropy: float | None = None
        self.unigram_bpb: float | None = None

    def where(self) -> str:
        return f"step {self.step} ({self.tokens:,} tokens)"

    # -- start --

    def begin(self, setup: _Setup) -> None:
        cfg, run_dir = self.cfg, self.run_dir
        self.setup = setup
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in (RESULT_FILE, CHECKPOINT_FILE):
            (run_dir / stale).unlink(missing_ok=True)
        write_json_atomic(run_dir / CONFIG_FILE, _finite(cfg.to_dict()), indent=2)
        setup.cache.tokenizer.save(run_dir / TOKENIZER_FILE)
        (run_dir / METRICS_FILE).write_text("", encoding="utf-8")

        counts = np.asarray(setup.cache.meta["unigram_counts"], dtype=np.float64)
        self.unigram = metrics.unigram_probs(counts).float()
        self.unigram_entropy = metrics.unigram_entropy(counts)
        unk_id = setup.cache.tokenizer.unk_id
        self.unk_id = None if unk_id is None else int(unk_id)
        self.token_strings = setup.cache.tokenizer.token_strings()
        self.unigram_bpb = metrics.unigram_bpb(
            counts, setup.windows[:, 1:], setup.window_nbytes, self.unk_id
        )

        device = setup.device
        if setup.threads is not None:
            torch.set_num_threads(setup.threads)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            torch.cuda.reset_peak_memory_stats(device)
        _warm_up(device, cfg)
        torch.manual_seed(cfg.seed)

    # -- the loop --

    def train(self, progress: Progress | None, on_eval: OnEval | None) -> tuple[str, str]:
        cfg, setup = self.cfg, self.setup
        assert setup is not None
        device = setup.device
        self.model = model = GPT(setup.model_cfg).to(device)
        model.train()
        self.optimizer = optimizer = make_optimizer(model, cfg, device)
        autocast = _autocast(device, cfg.precision)
        scaler = torch.amp.GradScaler("cuda") if cfg.precision == "fp16" else None
        sampler = BatchSampler(setup.cache.train, cfg.seq_len, cfg.batch_size, cfg.seed)
        next_eval = cfg.eval_every_tokens
        loss_sum, loss_n = 0.0, 0
        train_started = time.monotonic()
        t0 = time.monotonic()
        while self.tokens < cfg.max_tokens:
            lr = lr_at(self.tokens, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            micro = [sampler.next().to(device, non_blocking=True) for _ in range(cfg.grad_accum)]
            loss = accumulate_gradients(model, micro, autocast=autocast, scaler=scaler)
            if scaler is not None:
                scaler.unscale_(optimizer)
            norm = (
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                if cfg.grad_clip > 0
                else None
            )
            loss_value = float(loss)  # one host sync per optimizer step
            if not math.isfinite(loss_value):
                raise _Diverged(
                    f"training loss is {loss_value} at step {self.step + 1} "
                    f"({self.tokens:,} tokens)"
                )
            if scaler is None and norm is not None and not math.isfinite(float(norm)):
                raise _Diverged(
                    f"gradient norm is {float(norm)} at step {self.step + 1} "
                    f"({self.tokens:,} tokens)"
                )
            if scaler is not None:
                scaler.step(optimizer)  # skips steps whose fp16 gradients overflowed
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            self.step += 1
            self.tokens += cfg.tokens_per_step
            loss_sum += loss_value
            loss_n += 1
            if progress is not None:
                progress(min(self.tokens, cfg.max_tokens), cfg.max_tokens)
            over_time = (
                cfg.max_wall_s is not None and time.monotonic() - train_started > cfg.max_wall_s
            )
            if self.tokens >= next_eval or self.tokens >= cfg.max_tokens or over_time:
                self.train_s += time.monotonic() - t0
                self._evaluate(lr, loss_sum / loss_n, on_eval)
                loss_sum, loss_n = 0.0, 0
                while next_eval <= self.tokens:
                    next_eval += cfg.eval_every_tokens
                t0 = time.monotonic()
            if over_time:
                return outcomes.TIMEOUT, (
                    f"max_wall_s={cfg.max_wall_s:g} reached after {self.tokens:,} of "
                    f"{cfg.max_tokens:,} tokens"
                )
        return outcomes.COMPLETE, f"trained {self.tokens:,} tokens in {self.step} steps"

    def _evaluate(self, lr: float, train_loss: float, on_eval: OnEval | None) -> None:
        cfg, setup, model = self.cfg, self.setup, self.model
        assert setup is not None and model is not None
        autocast = _autocast(setup.device, cfg.precision)
        vals = evaluate(
            model,
            setup.windows,
            setup.window_nbytes,
            batch_size=cfg.batch_size,
            device=setup.device,
            autocast=autocast,
            unk_id=self.unk_id,
            unigram=self.unigram,
            token_strings=self.token_strings,
        )
        samples, generated, unk = [], 0, 0
        tokenizer = setup.cache.tokenizer
        for prompt in cfg.sample_prompts:
            gen = torch.Generator().manual_seed(cfg.seed)
            with autocast():
                new = sample_tokens(
                    model,
                    _prompt_ids(tokenizer, prompt),
                    cfg.sample_tokens,
                    temperature=EVAL_SAMPLE_TEMPERATURE,
                    top_k=EVAL_SAMPLE_TOP_K,
                    generator=gen,
                    device=setup.device,
                )
            samples.append({"prompt": prompt, "text": tokenizer.decode(new)})
            generated += len(new)
            if self.unk_id is not None:
                unk += sum(1 for i in new if i == self.unk_id)
        self.n_evals += 1
        row = {
            "step": self.step,
            "tokens": self.tokens,
            "lr": lr,
            "train_loss": train_loss,
            "val_loss": vals["val_loss"],
            "val_bpb": vals["val_bpb"],
            "accuracy": vals["accuracy"],
            "unigram_entropy": self.unigram_entropy,
            "unigram_bpb": self.unigram_bpb,
            "unigram_gap": metrics.unigram_gap(self.unigram_entropy, vals["val_loss"]),
            "kl_mean_to_unigram": vals["kl_mean_to_unigram"],
            "mean_kl_to_mean": vals["mean_kl_to_mean"],
            "top20_overlap": vals["top20_overlap"],
            "top_tokens": vals["top_tokens"],
            "unk_rate_targets": vals["unk_rate_targets"],
            "unk_rate_samples": unk / generated if generated else 0.0,
            "samples": samples,
            "peak_mem_bytes": peak_memory_bytes(setup.device),
            "tokens_per_s": self.tokens / self.train_s if self.train_s > 0 else 0.0,
            "elapsed_s": time.monotonic() - self.started,
        }
        row = _finite(row)
        with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, allow_nan=False) + "\n")
        self.last_metrics = row
        bpb = row["val_bpb"]
        if bpb is not None and (self.best_val_bpb is None or bpb < self.best_val_bpb):
            self.best_val_bpb, self.best_tokens = bpb, self.tokens
            self._save_checkpoint(bpb)
        if on_eval is not None:
            on_eval(row)

    def _save_checkpoint(self, val_bpb: float) -> None:
        assert self.model is not None and self.setup is not None
        path = self.run_dir / CHECKPOINT_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save(
            {
                "state_dict": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                "fingerprint": self.cfg.fingerprint(),
                "model_config": dataclasses.asdict(self.setup.model_cfg),
                "tokens": self.tokens,
                "val_bpb": val_bpb,
            },
            tmp,
        )
        os.replace(tmp, path)

    # -- the end --

    def release_memory(self) -> None:
        """Drop the model and optimizer so writing the result cannot fail for lack of memory."""
        self.model = None
        self.optimizer = None
        if self.setup is not None and self.setup.device.type == "cuda":
            torch.cuda.empty_cache()

    def finish(self, outcome: str, reason: str, tb: str | None = None) -> RunResult:
        setup = self.setup
        meta = setup.cache.meta if setup is not None else {}
        device = setup.device if setup is not None else torch.device("cpu")
        params = param_breakdown(setup.model_cfg) if setup is not None else {}
        result = RunResult(
            outcome=outcome,
            reason=reason,
            exit_code=outcomes.EXIT_CODES[outcome],
            tokens_seen=self.tokens,
            steps=self.step,
            wall_s=time.monotonic() - self.started,
            tokens_per_s=self.tokens / self.train_s if self.train_s > 0 else 0.0,
            peak_mem_bytes=peak_memory_bytes(device),
            params=params,
            final_metrics=self.last_metrics,
            best_val_bpb=self.best_val_bpb,
            best_tokens=self.best_tokens,
            n_evals=self.n_evals,
            vocab_size=setup.model_cfg.vocab_size if setup is not None else None,
            unigram_entropy=self.unigram_entropy,
            unigram_bpb=self.unigram_bpb,
            unk_rate=meta.get("unk_rate"),
            bytes_per_token=meta.get("bytes_per_token"),
            device=str(device),
            fingerprint=self.cfg.fingerprint(),
            traceback=tb,
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.run_dir / RESULT_FILE, _finite(result.to_dict()), indent=2)
        return result


# --- generation from a finished run ------------------------------------------------------------


def load_checkpoint(run_dir: Path, cfg: TrainConfig | None = None) -> tuple[GPT, TrainConfig]:
    """The run's best weights in a CPU model (eval mode), checked against its ``config.json``."""
    run_dir = Path(run_dir)
    cfg = cfg or read_config(run_dir)
    path = run_dir / CHECKPOINT_FILE
    if not path.is_file():
        raise SweepsError(
            f"{path} does not exist; the run wrote no checkpoint (it is written at the first "
            "evaluation); train it longer or pick another run"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        fingerprint = ckpt["fingerprint"]
        model_cfg = ModelConfig(**ckpt["model_config"])
        state = ckpt["state_dict"]
    except SweepsError:
        raise
    except Exception as exc:
        raise SweepsError(f"{path} is not a valid checkpoint ({exc}); retrain the run") from None
    if fingerprint != cfg.fingerprint():
        raise SweepsError(
            f"{path} was trained with another config (fingerprint {fingerprint}, but "
            f"{run_dir / CONFIG_FILE} gives {cfg.fingerprint()}); use the run dir it came from"
        )
    model = GPT(model_cfg)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise SweepsError(f"{path} does not fit its model config: {first}") from None
    model.eval()
    return model, cfg


def generate(
    run_dir: Path,
    prompt: str,
    *,
    max_new_tokens: int = 100,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """The prompt and its continuation by the run's best checkpoint, markers shown as ``<Q>``."""
    from lm.tokenizers import load_tokenizer

    if max_new_tokens < 0:
        raise SweepsError(f"max_new_tokens must be >= 0, got max_new_tokens={max_new_tokens}")
    if temperature < 0:
        raise SweepsError(f"temperature must be >= 0, got temperature={temperature}")
    if top_k is not None and top_k < 1:
        raise SweepsError(f"top_k must be >= 1, got top_k={top_k}")
    run_dir = Path(run_dir)
    model, _ = load_checkpoint(run_dir)
    tok_path = run_dir / TOKENIZER_FILE
    if not tok_path.is_file():
        raise SweepsError(f"{tok_path} does not exist; the run dir is incomplete, retrain it")
    tokenizer = load_tokenizer(tok_path)
    ids = _prompt_ids(tokenizer, prompt)
    new = sample_tokens(
        model,
        ids,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        generator=torch.Generator().manual_seed(seed),
        device=torch.device("cpu"),
    )
    return tokenizer.decode(ids + new)


# --- the child entry ---------------------------------------------------------------------------

USAGE = "usage: python -m lm.train RUN_DIR   (RUN_DIR holds config.json; see lm/outcomes.py)"


def _log_eval(row: dict[str, Any]) -> None:
    # For people reading the child's log; the orchestrator reads metrics.jsonl instead.
    print(
        f"eval step {row['step']} tokens {row['tokens']} val_loss {row['val_loss']} "
        f"val_bpb {row['val_bpb']} unigram_gap {row['unigram_gap']}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lm.train RUN_DIR``: train ``RUN_DIR/config.json``; exit code per outcome."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if len(args) != 1:
        print(USAGE, file=sys.stderr)
        return outcomes.BAD_INPUT_EXIT_CODE
    run_dir = Path(args[0])
    try:
        cfg = read_config(run_dir)
        result = run(cfg, run_dir, on_eval=_log_eval)
    except SweepsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"{result.outcome}: {result.reason}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
