"""Analytic peak-memory estimate of one training run, every term named (arithmetic, no torch).

``estimate(cfg, device, counts=) -> MemoryEstimate`` predicts what ``python -m lm.train`` will
measure as ``peak_mem_bytes``: on the CPU the child's peak *anonymous* resident set
(``lm.rss.peak_anon_bytes``: tensors, the heap, the interpreter's and torch's private memory;
not the file-backed pages of shared libraries and token memmaps, which the page cache decides
and the enforced limit does not hold); on CUDA ``torch.cuda.max_memory_allocated`` (tensors
only: ``MemoryEstimate.allocated``) plus what the CUDA context and the caching allocator hold
beyond it, because a budget is about the whole device. The estimate reads no file: the
corpus's token counts come in as ``counts`` (``lm.tokens.corpus_counts``).

Notation: B micro-batch (``batch_size``), T ``seq_len``, C ``d_model``, H ``n_heads``, F ``d_ff``,
V ``vocab_size``, L ``n_layers``, P parameters (a tied head counted once). ``a`` is the byte size
of an activation that autocast lowers (4 in fp32, 2 in bf16/fp16); ``s`` that of the attention
scores. The terms (``bytes`` is each term's size; ``at_peak`` what it holds at the peak moment),
each computed by one function: the tensors' in ``lm.memory_tensors``, the rest here:

- ``weights``, ``grads``, ``optimizer`` (``weights_and_optimizer``): P x 4 fp32 master weights
  (also under autocast) + the causal-mask buffers (L x T x T bools), with bf16/fp16 autocast
  also the low-precision copies of every matmul weight that autocast makes and autograd saves;
  P x 4 gradients, freed after every optimizer step (``zero_grad(set_to_none)``), so live at
  the loss-backward peak only when ``grad_accum > 1``; AdamW's two fp32 states, 2 x P x 4.
- ``read_branch`` (``read_branch``): a run with cooldown reads (``cooldown_reads``,
  ``lm.cooldown``) keeps a copy of its weights and AdamW's states, 3 x P x 4, while a read's
  branch trains and is evaluated, so every moment recurs on top of it. The copy is on the host:
  on the CPU it counts (a CPU trial's limit holds it); on CUDA it costs the device nothing.
- activations saved for backward (``block`` per layer, ``activations`` over all layers;
  ``grad_accum`` does not multiply them: micro-batches run one after another): ``embeddings`` (the
  first block's input), ``residual`` (block input and mid-block sum, + the final LayerNorm's
  input), ``norms`` (LayerNorm outputs as the next matmul saves them + mean/rstd), ``attention``
  (q, k, v and the output; naive also q scaled), ``attention_scores`` (``attention_scores``:
  ``naive`` keeps the B x H x T x T softmax per layer, with dropout its mask and output too;
  ``sdpa`` only the kernel's logsumexp, except on the CPU with dropout, where it falls back to the
  math path; at the attention backward two more score-sized gradients exist, so naive memory grows
  with T^2), ``ffn`` (the up projection's output and the GELU's). Dropout adds a mask per site
  (fp32 noise on the CPU, 1-byte masks on CUDA) to the term of the tensor it masks. With
  ``checkpointing`` each block keeps only its input, plus one recomputed block in backward.
- ``logits``, ``cross_entropy`` (``loss_head``): the B x T x V logits (under autocast the
  low-precision copy plus the fp32 upcast) and the loss's working set beyond them, so that the
  two make three fp32 B x T x V tensors at the start of backward (measured with torch's
  saved-tensor hooks and allocation events).
- ``evaluation`` (``evaluation``): b = min(B, evaluation windows) windows without gradients;
  the collapse statistics hold four fp32 b x T x V tensors at once: the peak when V is large
  and the model small.
- ``data`` (``_data``, CPU): the evaluation windows and the unigram tables. The token pages the
  memmaps touch are shown (``FAULT_AROUND_BYTES`` around each read) but not counted: they are
  file-backed.
- ``allocator`` (``_cpu_allocator``, ``_cuda_allocator``): CPU (glibc): once the first frees have
  raised malloc's dynamic mmap threshold, every tensor under ``MMAP_THRESHOLD_MAX`` (a
  ``Moment`` sorts its parts by it) comes from the heap, which keeps its high-water mark;
  bigger tensors are mmap'ed and unmapped on free.
  So the resident tensors peak at heap + fragmentation + the largest mmap'ed set, heap and
  mapped each the largest over the moments, fragmentation from ``CPU_HEAP_FRAGMENTATION``,
  ``CPU_HEAP_FRAGMENTATION_BASE`` and ``CPU_HEAP_FRAGMENTATION_LARGE``. CUDA: the caching
  allocator's reserved-but-unallocated ``CUDA_ALLOCATOR_SLACK`` share of ``allocated``.
- ``overhead`` (``_overhead``, ``cpu_baseline_bytes``): CPU: the child's anonymous baseline once
  torch, numpy and tiktoken are imported and ``lm.train``'s warm-up step ran,
  ``CPU_BASELINE_BYTES`` (less ``CPU_FORK_SAVING_BYTES`` for a child forked from
  ``sweeps.forkserver``), plus ``CPU_BASELINE_PER_THREAD`` per intra-op thread, a BPE
  tokenizer's tables (``BPE_FIXED_BYTES`` + ``BPE_BYTES_PER_RANK`` per rank) and
  ``CPU_BF16_BYTES`` for oneDNN's bf16 kernels. CUDA: ``CUDA_CONTEXT_BYTES`` and
  ``CUDA_WORKSPACE_BYTES``.

The peak is the largest of four moments (``lm.memory_tensors.moments``, each a ``Moment`` of
named ``Part``s): the start of backward ("loss backward": all activations + logits +
cross-entropy), the top block's backward ("block backward": the loss head freed, naive's two
extra score gradients), the end of backward (all gradients, the embedding's dense gradient,
AdamW's temporaries) and the evaluation. ``total = sum(at_peak)`` over the terms;
``peak_moment`` names the moment that won and ``moments`` gives each one's tensor bytes.
``allocated`` is the tensors at the peak (+ the cuBLAS workspace on CUDA). The tensor part was
checked against torch's own allocation events and saved-tensor hooks; the whole on the CPU
against real runs (``tests/bench/bench_memory.py``, its docstring has the grid and the target).

Calibration, budgets and a CPU child's enforced limit live in ``sweeps.preflight``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from lm import host
from lm import memory_tensors as tensors
from lm.config import TrainConfig, param_breakdown
from lm.errors import SweepsError
from lm.flops import eval_windows
from lm.memory_tensors import ACTIVATION_TERMS

if TYPE_CHECKING:
    from lm.tokens import CorpusCounts

#: Anonymous resident memory of a ``python -m lm.train`` child before its model exists
#: (interpreter, torch, numpy, tiktoken, the warm-up step's lazily imported modules, the intra-op
#: thread pool): what ``lm.rss.peak_anon_bytes`` measures, the file-backed pages of the shared
#: libraries left out (``lm/rss.py`` says why). Measured with torch 2.x on Linux x86-64 (kernel
#: 6.18, 2 cores), MiB, 2-layer byte-level children of ``tests/lm/test_memory.py`` run as
#: subprocesses, 4-12 runs each:
#:
#:     child              anon peak    VmHWM (ru_maxrss)  RssFile at the end
#:     d_model 16 (tiny)  213.4-213.7  365.2-365.7        150.9-151.4
#:     "small", 1st batch 228.0-231.2  418.7-421.5        190.2-190.5
#:     "small", later     226.8-230.3  378.8-382.3        151.0-151.4
#:     "naive-T1024"      526.5-527.4  677.6-678.9        150.3-150.7
#:     "bf16-logits"      473.4-480.4  629.6-636.4        155.7-156.1
#:
#: The same "small" child measured 348-352 MB and once 443.6 MB (``ru_maxrss``) on another
#: machine: file-backed pages and ``ru_maxrss``'s inheritance move the resident peak by ~100 MB
#: between runs, the anonymous peak moves by 4 MiB. 1, 2 and 4 threads alike; runs after the
#: torch libraries were dropped from the page cache (``posix_fadvise``) or after a 3 GiB
#: process alike. The tiny child's anonymous peak, less its model, is this baseline (+ <2 MiB).
CPU_BASELINE_BYTES = 215 * 2**20
#: A child forked from ``sweeps.forkserver`` has the same anonymous baseline (measured 214.5 MiB
#: for the tiny child against 213.5 from a subprocess): what it saves, 53 MiB of torch's library
#: pages that a fresh interpreter maps, is file-backed and no longer counted.
CPU_FORK_SAVING_BYTES = 0
LAUNCHERS = ("subprocess", "fork")
#: Per intra-op thread (stacks and per-thread scratch of the BLAS/oneDNN pools).
CPU_BASELINE_PER_THREAD = 256 * 2**10
#: bf16 autocast on the CPU loads oneDNN's low-precision kernels.
CPU_BF16_BYTES = 20 * 2**20
#: A BPE tokenizer (tiktoken's rank tables and the JSON they come from): fixed part and per rank.
BPE_FIXED_BYTES = 4 * 2**20
BPE_BYTES_PER_RANK = 720
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
#: What a run's ``peak_mem_bytes`` measures, named beside it in ``result.json`` and the trial
#: record (``peak_mem_kind``), so calibration never divides one quantity by another: the CPU
#: child's peak anonymous resident set (``lm.rss``: everything the process holds), CUDA's
#: ``torch.cuda.max_memory_allocated`` (tensors only: no context, no allocator slack), and the
#: parent's poll of a child's resident set (when the child wrote no peak of its own).
PEAK_CPU_ANON = "cpu_peak_anon"
PEAK_CUDA_ALLOCATED = "cuda_max_allocated"
PEAK_HOST_RSS = "host_rss"
#: Read fault-around of file-backed mappings on Linux (``fault_around_bytes``).
FAULT_AROUND_BYTES = 64 * 2**10


TERM_ORDER = (
    "weights",
    "grads",
    "optimizer",
    "read_branch",
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

    @property
    def measured(self) -> int:
        """The prediction of what the child measures as ``peak_mem_bytes`` (``peak_kind``): on
        CUDA the tensors (``allocated``), on the CPU the whole (``total``)."""
        return self.allocated if self.device == "cuda" else self.total

    @property
    def measured_kind(self) -> str:
        return peak_kind(self.device)

    def calibrated(self, factor: float) -> int:
        """``total`` with the study's calibration ``factor`` (measured / ``measured`` of its
        finished trials) applied to what it was learnt on. CPU: the whole. CUDA: the tensors
        only; the workspace, the allocator's slack on the scaled tensors and the context are
        added after it, since max_memory_allocated never saw them (scaling a 512 MiB context by
        a tensor ratio of 0.3 would reserve too little and pack too many trials)."""
        if self.device != "cuda":
            return round(self.total * factor)
        tensors = round((self.allocated - CUDA_WORKSPACE_BYTES) * factor)
        allocated = tensors + CUDA_WORKSPACE_BYTES
        return allocated + _cuda_allocator(allocated).bytes + CUDA_CONTEXT_BYTES

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
    counts: CorpusCounts | None = None,
    launcher: str = "subprocess",
) -> MemoryEstimate:
    """Predicted peak memory of training ``cfg`` on ``device`` ("cpu" or "cuda").

    ``threads`` (CPU intra-op threads; default: this machine's cores) and ``counts`` (the
    corpus's token counts, ``lm.tokens.corpus_counts``; default: unknown) refine the small
    terms; neither is needed, and nothing is read from disk here. ``launcher``: how the CPU
    child starts, ``subprocess`` (``python -m lm.train``) or ``fork`` (from
    ``sweeps.forkserver``: a smaller baseline).
    """
    if launcher not in LAUNCHERS:
        raise SweepsError(f"launcher must be subprocess or fork, got launcher={launcher!r}")
    if not isinstance(device, str):
        raise SweepsError(f"device must be cpu or cuda, got device={device!r}")
    device = host.device_kind(device)
    if cfg.precision == "fp16" and device == "cpu":
        raise SweepsError("precision fp16 needs a CUDA device; estimate it with device cuda")
    s = tensors.Shape.of(cfg, cuda=device == "cuda")
    params = param_breakdown(cfg.model_config())
    static = tensors.weights_and_optimizer(s, params["total"])
    scores = tensors.attention_scores(s)
    block = tensors.block(s, scores)
    acts = tensors.activations(s, block)
    head = tensors.loss_head(s)
    windows = eval_windows(
        cfg.eval_tokens, cfg.seq_len, counts.val_tokens if counts is not None else None
    )
    evaluation = tensors.evaluation(cfg, s, windows)
    moments = tensors.moments(s, static, block, acts, scores, head, evaluation)
    peak = max(moments, key=lambda m: m.live)  # the first of equals, in moment order
    at: dict[str, int] = dict.fromkeys(TERM_ORDER, 0)
    for part in peak.parts:
        at[part.term] += part.bytes
    allocated = peak.live
    if s.cuda:
        allocated += CUDA_WORKSPACE_BYTES
        allocator = _cuda_allocator(allocated)
    else:
        allocator = _cpu_allocator(moments, allocated)
    data = _data(cfg, s, counts.train_tokens if counts is not None else None, windows)
    overhead = _overhead(cfg, s.cuda, threads, launcher)
    branch = tensors.read_branch(cfg, s, static)
    allocated += branch
    at.update(
        read_branch=branch, data=data.bytes, allocator=allocator.bytes, overhead=overhead.bytes
    )
    sizes = {
        "weights": static.weights,
        "grads": static.grads,
        "optimizer": static.optimizer,
        "read_branch": branch,
        **acts._asdict(),
        "logits": head.logits,
        "cross_entropy": head.cross_entropy,
        "evaluation": evaluation.bytes,
        "data": data.bytes,
        "allocator": allocator.bytes,
        "overhead": overhead.bytes,
    }
    formulas = _formulas(s, static, scores, evaluation, data, allocator, overhead)
    terms = tuple(
        Term(name, int(sizes[name]), int(at[name]), *formulas[name]) for name in TERM_ORDER
    )
    return MemoryEstimate(
        device=device,
        precision=cfg.precision,
        attention=cfg.attention,
        vocab_size=s.V,
        params=params,
        terms=terms,
        total=int(sum(at.values())),
        allocated=int(allocated),
        peak_moment=peak.name,
        moments={m.name: int(m.live) for m in moments},
    )


# --- beyond the tensors: data, allocator, overhead ---------------------------------------------


class _Extra(NamedTuple):
    """A term computed apart from the moments: its bytes, formula and inputs."""

    bytes: int
    formula: str
    inputs: dict[str, Any]


def _cuda_allocator(allocated: int) -> _Extra:
    return _Extra(
        int(CUDA_ALLOCATOR_SLACK * allocated), "slack x allocated", {"slack": CUDA_ALLOCATOR_SLACK}
    )


def _cpu_allocator(moments: tuple[tensors.Moment, ...], allocated: int) -> _Extra:
    """glibc: tensors below ``MMAP_THRESHOLD_MAX`` come from the heap once the first frees have
    raised the mmap threshold, and the heap keeps its high-water mark (fragmented, not
    trimmed); bigger ones are mmap'ed and unmapped on free."""
    heap = max(m.heap for m in moments)
    mapped = max(m.mapped for m in moments)
    fragmentation = min(
        CPU_HEAP_FRAGMENTATION * heap,
        CPU_HEAP_FRAGMENTATION_BASE + CPU_HEAP_FRAGMENTATION_LARGE * heap,
    )
    resident = heap + int(fragmentation) + mapped
    return _Extra(
        max(0, resident - allocated),
        "heap + fragmentation + mapped - allocated",
        {"heap": heap, "mapped": mapped, "fragmentation": int(fragmentation)},
    )


def _data(cfg: TrainConfig, s: tensors.Shape, train_tokens: int | None, n_windows: int) -> _Extra:
    """The evaluation windows and the unigram tables (host memory; 0 on CUDA).

    The token memmaps' pages are shown (``token_pages``, ``val_pages``) but not counted: they
    are file-backed, shared by every trial through the page cache and reclaimable, so neither
    the measured peak (anonymous, ``lm.rss``) nor the enforced limit holds them.
    """
    if s.cuda:
        return _Extra(0, "host memory only (0 on the device)", {})
    eval_tensors = n_windows * (2 * s.T + 1) * 8  # ids (N, T + 1) and nbytes (N, T), int64
    unigram = s.V * (8 * 3 + 40)  # counts list (Python ints), float64 tables
    item = 4 if s.V > 65536 else 2
    assert cfg.max_tokens is not None and cfg.eval_tokens is not None  # resolved (lm.budget)
    steps = math.ceil(cfg.max_tokens / cfg.tokens_per_step)
    windows = steps * cfg.grad_accum * s.B
    if train_tokens is None:
        # No corpus to look at: assume the whole run's windows touch distinct blocks, capped.
        touched = min(windows * FAULT_AROUND_BYTES, 16 * 2**20)
        file_bytes = None
    else:
        # The memmap faults in FAULT_AROUND_BYTES around each read: the expected count of
        # distinct blocks that ``windows`` random windows touch.
        file_bytes = train_tokens * item
        blocks = max(1, math.ceil(file_bytes / FAULT_AROUND_BYTES))
        per_window = 1 + (s.T + 1) * item / FAULT_AROUND_BYTES
        expected = blocks * (1 - math.exp(-windows * per_window / blocks))
        touched = min(file_bytes, int(expected * FAULT_AROUND_BYTES))
    val_pages = min(cfg.eval_tokens, n_windows * s.T + 1) * item * 2
    return _Extra(
        int(eval_tensors + unigram),
        "eval windows + unigram tables (token pages: file-backed, not counted)",
        {
            "train_file_bytes": file_bytes,
            "train_windows": windows,
            "token_pages": int(touched),
            "val_pages": val_pages,
            "eval_windows": n_windows,
        },
    )


def _overhead(cfg: TrainConfig, cuda: bool, threads: int | None, launcher: str) -> _Extra:
    if cuda:
        return _Extra(
            CUDA_CONTEXT_BYTES + CUDA_WORKSPACE_BYTES,
            "context + workspace",
            {"context": CUDA_CONTEXT_BYTES, "workspace": CUDA_WORKSPACE_BYTES},
        )
    n = threads if threads is not None else host.cpu_threads()
    return _Extra(
        cpu_baseline_bytes(cfg, n, launcher),
        "baseline + threads + tokenizer (+ bf16 kernels)",
        {
            "baseline": CPU_BASELINE_BYTES,
            "launcher": launcher,
            "threads": n,
            "bpe_ranks": cfg.vocab_size if cfg.tokenizer == "bpe" else 0,
            "bf16_kernels": CPU_BF16_BYTES if cfg.precision == "bf16" else 0,
        },
    )


def _formulas(
    s: tensors.Shape,
    static: tensors.Static,
    scores: tensors.Scores,
    evaluation: tensors.Evaluation,
    data: _Extra,
    allocator: _Extra,
    overhead: _Extra,
) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each term's formula and the inputs it was computed from, as ``sweeps estimate`` shows."""
    B, T, C, H, F, V, L, a = s.B, s.T, s.C, s.H, s.F, s.V, s.L, s.a
    ck = s.checkpointing
    return {
        "weights": (
            "P x 4 + L x T x T" + (" + 2 x matmul_params" if s.lowp else ""),
            {"P": static.params, "L": L, "T": T, "matmul_params": static.matmul_params},
        ),
        "grads": ("P x 4", {"P": static.params}),
        "optimizer": ("2 x P x 4", {"P": static.params}),
        "read_branch": (
            "3 x P x 4 with cooldown reads on the CPU, else 0 (a host copy)",
            {"P": static.params},
        ),
        "embeddings": (
            "B x T x C x 4" + (" x 2 (dropout)" if s.dropout else ""),
            {"B": B, "T": T, "C": C},
        ),
        "residual": (
            "(L + 1) x B x T x C x 4" if ck else "(2L + 1) x B x T x C x 4",
            {"B": B, "T": T, "C": C, "L": L},
        ),
        "norms": (
            "B x T x (C x a + 8)" if ck else "(2L + 1) x B x T x (C x a + 8)",
            {"B": B, "T": T, "C": C, "L": L, "a": a},
        ),
        "attention": (
            f"L x {tensors.qkv_saved(s)} x B x T x C x a",
            {"B": B, "T": T, "C": C, "L": L, "a": a},
        ),
        "attention_scores": (
            ("L x B x H x T x T x " + ("(s + 2a)" if s.dropout else "s"))
            if s.materialized
            else "L x B x H x T x 4",
            {
                "B": B,
                "H": H,
                "T": T,
                "L": L,
                "s": scores.saved_elem,
                "backward_transient": scores.backward_transient,
            },
        ),
        "ffn": ("L x 2 x B x T x F x a", {"B": B, "T": T, "F": F, "L": L, "a": a}),
        "logits": ("B x T x V x (2 + 4)" if s.lowp else "B x T x V x 4", {"B": B, "T": T, "V": V}),
        "cross_entropy": ("3 x B x T x V x 4 - logits", {"B": B, "T": T, "V": V}),
        "evaluation": (
            "max(4 x b x T x V x 4, one block's forward)",
            {"b": evaluation.batch, "T": T, "V": V, "windows": evaluation.windows},
        ),
        "data": (data.formula, data.inputs),
        "allocator": (allocator.formula, allocator.inputs),
        "overhead": (overhead.formula, overhead.inputs),
    }


# --- helpers -----------------------------------------------------------------------------------


def peak_kind(device: str) -> str:
    """What ``peak_mem_bytes`` measures on a device kind (``cpu`` or ``cuda``)."""
    return PEAK_CUDA_ALLOCATED if device == "cuda" else PEAK_CPU_ANON


def cpu_baseline_bytes(
    cfg: TrainConfig | None = None, threads: int | None = None, launcher: str = "subprocess"
) -> int:
    """The CPU child's anonymous memory before its model exists (the ``overhead`` term)."""
    n = threads if threads is not None else host.cpu_threads()
    base = CPU_BASELINE_BYTES + CPU_BASELINE_PER_THREAD * n
    if launcher == "fork":
        base -= CPU_FORK_SAVING_BYTES
    if cfg is not None:
        if cfg.tokenizer == "bpe":
            assert cfg.vocab_size is not None  # TrainConfig sets it
            base += BPE_FIXED_BYTES + BPE_BYTES_PER_RANK * cfg.vocab_size
        if cfg.precision == "bf16":
            base += CPU_BF16_BYTES
    return base
