"""One training run, end to end: ``run(cfg, run_dir) -> RunResult``; the trial child's entry.

``python -m lm.train RUN_DIR`` reads ``RUN_DIR/config.json`` and calls ``run``; that is what
every sweep trial executes. What it writes in ``run_dir`` is the contract in ``lm/run_files.py``;
``result.json`` is written at the end whatever the outcome: complete, oom, diverged, timeout,
interrupted (SIGTERM/SIGINT) or crashed. Exit codes are in ``lm/outcomes.py``. Bad input (a
``SweepsError`` while checking the config, corpus, token cache, device or resume checkpoint)
writes nothing and exits 2.

Resuming: every ``checkpoint_every_tokens`` the run saves ``resume.pt`` at an evaluation (where
the running loss is empty): weights, AdamW and GradScaler states, the batch sampler's generator,
torch's RNG, counters and evaluation bookkeeping. A run whose directory holds one of the same
``resume_fingerprint`` continues from it, keeping the ``metrics.jsonl`` rows up to it, and
computes what the uninterrupted run would have, bit for bit on the same device and threads. One
of another configuration is refused (one line): continuing it would be neither run.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm import budget, cooldown, flops, host, metrics, outcomes
from lm.config import SCHEDULE_FIELDS, ModelConfig, TrainConfig, param_breakdown
from lm.errors import SweepsError
from lm.evaluation import TooLittleData, eval_windows, evaluate
from lm.generate import prompt_ids, sample_tokens
from lm.memory import peak_kind
from lm.model import GPT
from lm.run_files import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    RESULT_FILE,
    RESUME_FILE,
    RESUME_INDEX_FILE,
    TOKENIZER_FILE,
    ProgressFile,
    RunResult,
    append_metrics,
    keep_metrics_until,
    read_config,
    write_config,
    write_result,
    write_resume_index,
)
from lm.runtime import (
    RunInterrupted,
    autocast_for,
    cpu_memory_limit,
    cuda_memory_limit,
    environment_error,
    is_oom,
    lift_cuda_memory_limit,
    peak_memory_bytes,
    resolve_device,
    signals_interrupt,
)
from lm.schedule import lr_at, lr_sum, read_points
from lm.snapshot import Trainables, load_resume, on_host, save_atomic
from lm.step import BatchSampler, accumulate_gradients, make_optimizer, set_lr, warm_up
from lm.step import lm_loss as lm_loss  # tests/gpu and tests/bench import it from here
from lm.tokens import TextRate, text_rate

Progress = Callable[[int, int], None]
OnEval = Callable[[dict[str, Any]], None]

#: Sampling of the evaluation samples (seeded with ``cfg.seed``, so runs are comparable).
EVAL_SAMPLE_TEMPERATURE = 0.8
EVAL_SAMPLE_TOP_K = 50


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
    #: The config with its budgets in tokens (``lm.budget.resolve``; as given when they were).
    cfg: TrainConfig
    rate: TextRate


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
    assert cfg.vocab_size is not None  # TrainConfig sets it
    cache = load_tokens(corpus, cfg.tokenizer, cfg.vocab_size, lowercase=cfg.lowercase)
    rate = text_rate(cache)
    cfg = budget.resolve(cfg, rate)
    assert cfg.eval_tokens is not None  # resolved just above
    windows, window_nbytes = eval_windows(
        cache.val, cache.val_nbytes, cfg.seq_len, cfg.eval_tokens, cfg.eval_bytes
    )
    if len(cache.train) < cfg.seq_len + 1:
        raise TooLittleData(
            f"the training split has {len(cache.train)} tokens, fewer than seq_len + 1 = "
            f"{cfg.seq_len + 1}; use a smaller seq_len or a bigger corpus"
        )
    model_cfg = cfg.model_config(vocab_size=int(cache.tokenizer.vocab_size))
    threads = host.run_threads(device.type, flops.step_flops(cfg, model_cfg.vocab_size))
    return _Setup(device, threads, cache, windows, window_nbytes, model_cfg, cfg, rate)


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
    with signals_interrupt():
        state = _RunState(cfg, run_dir, started)
        try:
            setup = _setup(cfg)
            cfg = state.cfg = setup.cfg
            resume = load_resume(cfg, run_dir)
        except TooLittleData as exc:  # the configuration's own ending, counted: not bad input
            return state.finish(outcomes.TOO_LITTLE_DATA, str(exc))
        except SweepsError:
            raise  # bad input: nothing written
        except BaseException as exc:
            return _ending(state, exc)
        failure: BaseException
        try:
            state.begin(setup, resume)
            limit_bytes = cfg.cpu_memory_limit_bytes if setup.device.type == "cpu" else None
            with cpu_memory_limit(limit_bytes) as limit:
                if limit is not None:  # a CUDA run's limit was set by begin()
                    state.memory_limit = limit
                outcome, reason = state.train(progress, on_eval)
            return state.finish(outcome, reason)
        except BaseException as exc:  # every ending gets a result.json
            failure = exc
        # Outside the except block: inside it the interpreter's current exception keeps the
        # traceback, and with it train()'s frames (model, optimizer, activations), alive, so an
        # OOM's release of memory would free nothing.
        return _ending(state, failure)


class EnvironmentFailure(Exception):
    """The environment failed the run so badly that not even ``result.json`` could be written
    (a full disk): ``main`` prints this one line and exits ``ENVIRONMENT_EXIT_CODE``."""


def _ending(state: _RunState, exc: BaseException) -> RunResult:
    """The result of a run that ended with ``exc`` (re-raised only for SystemExit)."""
    if isinstance(exc, (SystemExit, GeneratorExit)):
        raise exc
    cause = environment_error(exc)
    if cause is not None:
        reason = f"environment: {type(cause).__name__}: {cause} at {state.where()}"
        try:
            return state.finish(outcomes.CRASHED, reason, environment=True)
        except OSError as again:
            raise EnvironmentFailure(f"{reason}; result.json not written either: {again}") from None
    if isinstance(exc, (RunInterrupted, KeyboardInterrupt)):
        name = str(exc) or "SIGINT"
        return state.finish(outcomes.INTERRUPTED, f"{name} at {state.where()}")
    if isinstance(exc, _Diverged):
        return state.finish(outcomes.DIVERGED, str(exc))
    if is_oom(exc):
        lines = str(exc).strip().splitlines()
        first = f"{type(exc).__name__}" + (f": {lines[0][:300]}" if lines else "")
        drop_frames(exc)
        state.release_memory()
        limit = (
            ""
            if state.memory_limit is None
            else (
                f" (cuda_memory_limit_bytes={state.cfg.cuda_memory_limit_bytes:,})"
                if state.cfg.cuda_memory_limit_bytes is not None and _on_cuda(state)
                else f" (cpu_memory_limit_bytes={state.cfg.cpu_memory_limit_bytes:,})"
            )
        )
        return state.finish(outcomes.OOM, f"out of memory at {state.where()}{limit}: {first}")
    tb = "".join(traceback.format_exception(exc))
    print(tb, file=sys.stderr)
    return state.finish(outcomes.CRASHED, f"{type(exc).__name__}: {exc}", tb)


def _on_cuda(state: _RunState) -> bool:
    return state.setup is not None and state.setup.device.type == "cuda"


def drop_frames(exc: BaseException) -> None:
    """Let go of the frames ``exc`` and the exceptions chained to it hold (their locals: the
    model, its activations), so the memory they hold can be freed before the result is
    written. Only for an OOM: a crash keeps its traceback to report."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
            current.__traceback__ = None
        current = current.__cause__ or current.__context__


class _RunState:
    """The mutable state of one run, so any ending can report what was reached."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, started: float) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.started = started
        self.setup: _Setup | None = None
        self.model: GPT | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.parts: Trainables | None = None
        self.sampler: BatchSampler
        self.autocast: Callable[[], AbstractContextManager[Any]] = nullcontext
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
        self.resume: dict[str, Any] | None = None
        #: The tokens of the checkpoint this run continued, and of its latest one.
        self.resumed_from_tokens = 0
        self.checkpoint_tokens = 0
        self.cooldown_tokens_total = 0
        self.n_reads = 0
        #: The learning rate summed over the steps taken (``lm.schedule.lr_sum``).
        self.lr_sum = 0.0

    def where(self) -> str:
        return f"step {self.step} ({self.tokens:,} tokens)"

    # -- start --

    def begin(self, setup: _Setup, resume: dict[str, Any] | None = None) -> None:
        cfg, run_dir = self.cfg, self.run_dir
        self.setup = setup
        run_dir.mkdir(parents=True, exist_ok=True)
        # Resuming keeps best.pt: its evaluation is at or before the checkpoint, or after it on
        # the same computation (the continued run writes the same weights there again).
        stale = (RESULT_FILE,) if resume else (RESULT_FILE, CHECKPOINT_FILE, RESUME_INDEX_FILE)
        for name in stale:
            (run_dir / name).unlink(missing_ok=True)
        write_config(run_dir, cfg)
        setup.cache.tokenizer.save(run_dir / TOKENIZER_FILE)
        if resume is None:
            (run_dir / METRICS_FILE).write_text("", encoding="utf-8")
        else:
            self._resume_counters(resume)

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
            if cuda_memory_limit(device, cfg.cuda_memory_limit_bytes) is not None:
                self.memory_limit = cfg.cuda_memory_limit_bytes
        warm_up(device, cfg)
        torch.manual_seed(cfg.seed)

    def _resume_counters(self, resume: dict[str, Any]) -> None:
        """Where the checkpoint left off; rows written after it are dropped (they come again)."""
        self.resume = resume
        self.step, self.tokens = resume["step"], resume["tokens"]
        self.train_s, self.n_evals = resume["train_s"], resume["n_evals"]
        self.best_val_bpb, self.best_tokens = resume["best_val_bpb"], resume["best_tokens"]
        self.last_metrics = resume["last_metrics"]
        # Absent from the checkpoints of runs that took no reads (written before they existed).
        self.cooldown_tokens_total = resume.get("cooldown_tokens_total", 0)
        self.n_reads = resume.get("n_reads", 0)
        self.resumed_from_tokens = self.checkpoint_tokens = self.tokens
        self.lr_sum = lr_sum(self.tokens, self.cfg)
        keep_metrics_until(self.run_dir, self.tokens)

    # -- the loop --

    def train(self, progress: Progress | None, on_eval: OnEval | None) -> tuple[str, str]:
        cfg, setup = self.cfg, self.setup
        assert setup is not None
        device = setup.device
        self.model = model = GPT(setup.model_cfg).to(device)
        model.train()
        self.optimizer = make_optimizer(model, cfg, device)
        self.autocast = autocast_for(device, cfg.precision)
        # Disabled (bf16, fp32) it passes everything through: scale() returns the loss, step()
        # is optimizer.step(), unscale_() and update() do nothing.
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        self.sampler = BatchSampler(setup.cache.train, cfg.seq_len, cfg.batch_size, cfg.seed)
        self.parts = Trainables(model, self.optimizer, scaler, self.sampler.rng, device)
        assert cfg.max_tokens is not None and cfg.eval_every_tokens is not None  # resolved
        next_eval, wall_before = cfg.eval_every_tokens, 0.0
        if self.resume is not None:
            next_eval, wall_before = self._restore()
        loss_sum, loss_n, reads = 0.0, 0, read_points(cfg)
        # A resumed run's wall-clock limit counts the time its earlier processes trained.
        train_started = time.monotonic() - wall_before
        t0 = time.monotonic()
        here = (t0, time.process_time())  # this process's share, for a timeout's reason
        while self.tokens < cfg.max_tokens:
            sequences = self.step_sequences()
            loss_sum += self.optimizer_step(lr := lr_at(self.tokens, cfg), sequences=sequences)
            self.lr_sum += lr
            self.step += 1
            self.tokens += sequences * cfg.seq_len
            loss_n += 1
            if progress is not None:
                progress(min(self.tokens, cfg.max_tokens), cfg.max_tokens)
            over_time = (
                cfg.max_wall_s is not None and time.monotonic() - train_started > cfg.max_wall_s
            )
            evaluated = self.tokens >= next_eval or self.tokens >= cfg.max_tokens or over_time
            if evaluated:
                self.train_s += time.monotonic() - t0
                self._record(self.measure(lr, loss_sum / loss_n), on_eval)
                loss_sum, loss_n = 0.0, 0
                while next_eval <= self.tokens:
                    next_eval += cfg.eval_every_tokens
            # Before the checkpoint, which then holds it: a resumed run does not take it again.
            if self.tokens in reads and not over_time:
                read_started = time.monotonic()
                self._record(cooldown.read(self), on_eval, read=True)
                t0 += time.monotonic() - read_started  # the run's tokens/s is its own
            if evaluated:
                if self._checkpoint_due():
                    self._save_resume(next_eval, time.monotonic() - train_started)
                t0 = time.monotonic()
            if over_time:
                cpu = host.cpu_time_text(
                    time.process_time() - here[1],
                    time.monotonic() - here[0],
                    torch.get_num_threads(),
                )
                return outcomes.TIMEOUT, (
                    f"max_wall_s={cfg.max_wall_s:g} reached after {self.tokens:,} of "
                    f"{cfg.max_tokens:,} tokens; {cpu}"
                )
        return outcomes.COMPLETE, f"trained {self.tokens:,} tokens in {self.step} steps"

    def step_sequences(self) -> int:
        """The sequences of the next optimizer step: a whole step, but for the last of a budget
        worked out from bytes or FLOPs, which trains only what is left (``lm.budget``)."""
        cfg = self.cfg
        full = cfg.batch_size * cfg.grad_accum
        if "max_tokens" not in cfg.derived:
            return full
        assert cfg.max_tokens is not None  # derived, so resolved
        return max(1, min(full, math.ceil((cfg.max_tokens - self.tokens) / cfg.seq_len)))

    def optimizer_step(
        self, lr: float, read_step: int | None = None, sequences: int | None = None
    ) -> float:
        """One optimizer step at ``lr`` (of the main run, or step ``read_step`` of a cooldown
        read's branch, ``lm.cooldown``) over ``sequences`` (default: a whole step); its mean
        training loss. Raises ``_Diverged``."""
        cfg, model, optimizer, parts = self.cfg, self.model, self.optimizer, self.parts
        assert model is not None and optimizer is not None and parts is not None
        scaler = parts.scaler
        set_lr(optimizer, lr)
        device = parts.device
        if sequences is None or sequences == cfg.batch_size * cfg.grad_accum:
            sizes: list[int | None] = [None] * cfg.grad_accum
        else:  # the last step of a budget in bytes or FLOPs
            sizes = [
                min(cfg.batch_size, sequences - i) for i in range(0, sequences, cfg.batch_size)
            ]
        micro = [self.sampler.next(n).to(device, non_blocking=True) for n in sizes]
        loss = accumulate_gradients(model, micro, autocast=self.autocast, scaler=scaler)
        scaler.unscale_(optimizer)  # clip the true gradients
        norm = (
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if cfg.grad_clip > 0
            else None
        )
        loss_value = float(loss)  # one host sync per optimizer step
        where = (
            f"step {self.step + 1} ({self.tokens:,} tokens)"
            if read_step is None
            else f"step {read_step} of the cooldown read at {self.tokens:,} tokens"
        )
        if not math.isfinite(loss_value):
            raise _Diverged(f"training loss is {loss_value} at {where}")
        # fp16 overflows are the scaler's to skip; any other non-finite norm is divergence.
        if not scaler.is_enabled() and norm is not None and not math.isfinite(float(norm)):
            raise _Diverged(f"gradient norm is {float(norm)} at {where}")
        scaler.step(optimizer)  # skips steps whose fp16 gradients overflowed
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss_value

    # -- what a cooldown read needs (lm.cooldown.Branchable) --

    def take(self) -> dict[str, Any]:
        assert self.parts is not None
        return self.parts.take(copy=True)

    def put(self, state: dict[str, Any]) -> None:
        assert self.parts is not None
        self.parts.put(state)

    # -- resume checkpoints --

    def _restore(self) -> tuple[int, float]:
        """Load the resume checkpoint into the fresh model, optimizer, scaler, sampler and RNG
        (after the model's initialisation has drawn from it); (next evaluation, wall seconds)."""
        ckpt = self.resume
        assert ckpt is not None and self.parts is not None
        self.parts.put(ckpt)
        self.resume = None  # its tensors are copied: free them
        return ckpt["next_eval"], ckpt["train_wall_s"]

    def _checkpoint_due(self) -> bool:
        """At the first evaluation past each multiple of ``checkpoint_every_tokens`` (the
        final one has nothing left to resume)."""
        every = self.cfg.checkpoint_every_tokens
        assert self.cfg.max_tokens is not None  # resolved (lm.budget)
        return (
            every is not None
            and self.tokens < self.cfg.max_tokens
            and self.tokens // every > self.checkpoint_tokens // every
        )

    def _save_resume(self, next_eval: int, train_wall_s: float) -> None:
        cfg, parts = self.cfg, self.parts
        assert parts is not None
        write_resume_index(self.run_dir, cfg.resume_fingerprint(), self.tokens)
        save_atomic(
            self.run_dir / RESUME_FILE,
            {
                "resume_fingerprint": cfg.resume_fingerprint(),
                "config": cfg.computation(),
                # Covered by the fingerprint; said outright so a reader sees which rate continues.
                "schedule": {name: cfg.to_dict()[name] for name in SCHEDULE_FIELDS},
                "tokens": self.tokens,
                "step": self.step,
                **parts.take(copy=False),
                "next_eval": next_eval,
                "train_wall_s": train_wall_s,
                "train_s": self.train_s,
                "n_evals": self.n_evals,
                "best_val_bpb": self.best_val_bpb,
                "best_tokens": self.best_tokens,
                "last_metrics": self.last_metrics,
                "cooldown_tokens_total": self.cooldown_tokens_total,
                "n_reads": self.n_reads,
            },
        )
        self.checkpoint_tokens = self.tokens

    # -- evaluations --

    def measure(self, lr: float, train_loss: float) -> dict[str, Any]:
        """The ``metrics.jsonl`` row of an evaluation of the weights as they are."""
        cfg, setup, model = self.cfg, self.setup, self.model
        assert setup is not None and model is not None and self.unigram_entropy is not None
        autocast = self.autocast
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
                    prompt_ids(tokenizer, prompt),
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
        return {
            "step": self.step,
            "tokens": self.tokens,
            "lr": lr,
            "lr_sum": self.lr_sum,
            "train_bytes": self.train_bytes(self.tokens),
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
            "unk_argmax_rate": vals["unk_argmax_rate"],
            "unk_byte_rate": vals["unk_byte_rate"],
            "unk_rate_samples": unk / generated if generated else 0.0,
            "samples": samples,
            "peak_mem_bytes": peak_memory_bytes(setup.device),
            "tokens_per_s": self.tokens / self.train_s if self.train_s > 0 else 0.0,
            "elapsed_s": time.monotonic() - self.started,
        }

    def train_bytes(self, tokens: int) -> int:
        """The bytes of training text ``tokens`` training tokens stand for (the training
        split's bytes per token)."""
        assert self.setup is not None
        return round(tokens * self.setup.rate.train)

    def _record(self, row: dict[str, Any], on_eval: OnEval | None, *, read: bool = False) -> None:
        """Write an evaluation's row; the run's own (not a cooldown read's) is also its latest
        metrics and, when best, its ``best.pt``."""
        row = append_metrics(self.run_dir, row)
        if read:
            self.n_reads += 1
            self.cooldown_tokens_total += row["cooldown_tokens"]
        else:
            self.n_evals += 1
            self.last_metrics = row
            bpb = row["val_bpb"]
            if bpb is not None and (self.best_val_bpb is None or bpb < self.best_val_bpb):
                self.best_val_bpb, self.best_tokens = bpb, self.tokens
                self._save_checkpoint(bpb)
        if on_eval is not None:
            on_eval(row)

    def _save_checkpoint(self, val_bpb: float) -> None:
        assert self.model is not None and self.setup is not None
        save_atomic(
            self.run_dir / CHECKPOINT_FILE,
            {
                "state_dict": on_host(self.model.state_dict()),
                "fingerprint": self.cfg.fingerprint(),
                "model_config": dataclasses.asdict(self.setup.model_cfg),
                "tokens": self.tokens,
                "val_bpb": val_bpb,
            },
        )

    # -- the end --

    def release_memory(self) -> None:
        """Drop the model and optimizer so writing the result cannot fail for lack of memory."""
        self.model = None
        self.optimizer = None
        self.parts = None
        gc.collect()  # autograd graphs and modules hold reference cycles
        if self.setup is not None and self.setup.device.type == "cuda":
            torch.cuda.empty_cache()

    def finish(
        self, outcome: str, reason: str, tb: str | None = None, *, environment: bool = False
    ) -> RunResult:
        setup = self.setup
        meta = setup.cache.meta if setup is not None else {}
        device = setup.device if setup is not None else torch.device("cpu")
        if self.memory_limit is not None and device.type == "cuda":
            # An in-process run (tests, `sweeps train`) leaves its process as it found it.
            lift_cuda_memory_limit(device)
        params = param_breakdown(setup.model_cfg) if setup is not None else {}
        result = RunResult(
            outcome=outcome,
            reason=reason,
            exit_code=(
                outcomes.ENVIRONMENT_EXIT_CODE if environment else outcomes.EXIT_CODES[outcome]
            ),
            tokens_seen=self.tokens,
            train_bytes=round(self.tokens * setup.rate.train) if setup is not None else None,
            steps=self.step,
            wall_s=time.monotonic() - self.started,
            tokens_per_s=self.tokens / self.train_s if self.train_s > 0 else 0.0,
            peak_mem_bytes=peak_memory_bytes(device),
            peak_mem_kind=peak_kind(device.type),
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
            threads=torch.get_num_threads() if setup is not None else None,
            fingerprint=self.cfg.fingerprint(),
            traceback=tb,
            environment=environment,
            resumed_from_tokens=self.resumed_from_tokens,
            cooldown_tokens_total=self.cooldown_tokens_total,
            n_reads=self.n_reads,
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if outcome in (outcomes.COMPLETE, outcomes.DIVERGED):  # nothing left to resume
            for name in (RESUME_FILE, RESUME_INDEX_FILE):
                (self.run_dir / name).unlink(missing_ok=True)
        write_result(self.run_dir, result)
        return result


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
        # progress.json: the parent's live board advances between evaluations.
        result = run(cfg, run_dir, progress=ProgressFile(run_dir), on_eval=_log_eval)
    except SweepsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except EnvironmentFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return outcomes.ENVIRONMENT_EXIT_CODE
    print(f"{result.outcome}: {result.reason}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
