"""What one attempt of a trial measured, as fields of its record (``sweeps.record``): the child's
timings, peak memory, tokens and final metrics (``attempt_fields``), the compute it spent
(``compute_fields``), and the study's objective values of a finished run. Pure: the runner
(``sweeps.runner``) merges them into the trial's record and writes it.
"""

from __future__ import annotations

import math
import os
from typing import Any

from lm import flops, host, memory
from lm.config import TrainConfig
from sweeps.monitor import Attempt
from sweeps.record import FINAL_METRICS, KINDS, RESULT_FIELDS, TrialRecord, fits
from sweeps.spec import Limits, StudySpec


def peak_measured(
    result: dict[str, Any], last: dict[str, Any], peak_rss: int | None, device: str = "cpu"
) -> tuple[int | None, str | None]:
    """The trial's measured peak and what it measures (``lm.memory.peak_kind``): the child's
    own (``result.json``, else its last metrics row, measured the same way on its device), else
    the parent's poll of its resident set, which on a GPU is not device memory at all."""
    ran_on = str(result.get("device") or device).split(":")[0]
    own_kind = result.get("peak_mem_kind") or memory.peak_kind(ran_on)
    if result.get("peak_mem_bytes"):
        return int(result["peak_mem_bytes"]), own_kind
    if last.get("peak_mem_bytes"):
        return int(last["peak_mem_bytes"]), own_kind
    if peak_rss:
        return int(peak_rss), memory.PEAK_HOST_RSS
    return None, None


def attempt_fields(a: Attempt, device: str = "cpu") -> TrialRecord:
    """What the attempt's child measured: its timings, peak, tokens, parameters, what its
    ``result.json`` says (``RESULT_FIELDS``) and its final evaluation (``FINAL_METRICS``)."""
    out = TrialRecord(wall_s=round(a.wall_s, 3), child_pid=a.child_pid, returncode=a.returncode)
    if a.times.cold_start_s is not None:
        out.cold_start_s = round(a.times.cold_start_s, 3)
    if a.times.setup_s is not None:
        out.setup_s = round(a.times.setup_s, 3)
    if a.problems:  # the trial is judged on what was valid; what was not is kept, in short
        out.child_file_problems = capped(a.problems)
    r = a.result or {}
    last = a.history[-1] if a.history else {}
    final = r.get("final_metrics") or last
    peak, kind = peak_measured(r, last, a.peak_rss, device)
    if peak:
        out.peak_mem_bytes, out.peak_mem_kind = int(peak), kind
    tokens = r.get("tokens_seen", last.get("tokens"))
    if tokens is not None:
        out.tokens_seen = int(tokens)
    tps = r.get("tokens_per_s", last.get("tokens_per_s"))
    if tps is not None:
        out.tokens_per_s = float(tps)
        # The child reports tokens / (time in its training loop): invert it.
        out.train_s = float(tokens) / float(tps) if tps and tokens else 0.0
    params = r.get("params") or {}
    if params:
        out.params = params
        out.params_total = int(params.get("total", 0))
    # What the child's files give as they are: a value of another type is the child's problem
    # (``check_result`` names it), never one that fails the record when it is written.
    out.update(**_fitting(r, RESULT_FIELDS))
    out.update(**_fitting(final, FINAL_METRICS))
    if isinstance(last.get("step"), int):  # the evaluation a verdict was reached at
        out.last_eval_step = last["step"]
    if out.best_val_bpb is None:
        finite = [h["val_bpb"] for h in a.history if isinstance(h.get("val_bpb"), (int, float))]
        if finite:
            out.best_val_bpb = min(finite)
    return out


def _fitting(given: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` in ``given`` that are set and of their field's type."""
    return {k: given[k] for k in keys if given.get(k) is not None and fits(given[k], KINDS[k])}


def capped(problems: list[str], keep: int = 10) -> list[str]:
    """A list of noted problems as kept on a trial: the first ``keep``, then how many more."""
    return problems[:keep] + (
        [f"... and {len(problems) - keep} more"] if len(problems) > keep else []
    )


def over_compute_limit(predicted_flops: float, limits: Limits) -> str | None:
    """The reason a trial is not launched for its compute (``limits.max_flops``), else None.

    Told as ``pruned``: no outcome says "over the compute limit", and this one says nothing
    about memory (``predicted_oom`` would teach the sampler a false memory constraint). A spec
    whose every trial is over the limit is refused when it is read (``sweeps.spec``)."""
    if limits.max_flops is None or predicted_flops <= limits.max_flops:
        return None
    return (
        f"over the compute limit, not launched: {predicted_flops:.3g} training FLOPs "
        f"predicted > limits.max_flops = {limits.max_flops:.3g}"
    )


def compute_fields(
    cfg: TrainConfig, a: Attempt, kind: str = "cpu", env: dict[str, str] | None = None
) -> TrialRecord:
    """FLOPs of the tokens actually trained (``lm.flops``) and, on a known GPU, the MFU; the
    child ran on a ``kind`` device (``cpu``, ``cuda``) with ``env`` on top of this process's."""
    r = a.result or {}
    tokens = r.get("tokens_seen", a.history[-1].get("tokens") if a.history else None)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return TrialRecord()
    vocab = r.get("vocab_size") if isinstance(r.get("vocab_size"), int) else None
    n_evals = int(r["n_evals"]) if isinstance(r.get("n_evals"), int) else len(a.history)
    # A cooldown read's branch is compute the trial spent: its tokens and evaluation count.
    # (``check_result`` already dropped a value of the wrong type; an older child has none.)
    n_reads = int(max(0, r.get("n_reads") or 0))
    read_tokens = int(max(0, r.get("cooldown_tokens_total") or 0))
    f = flops.count(
        cfg, tokens, n_evals=n_evals + n_reads, vocab_size=vocab, cooldown_tokens=read_tokens
    )
    out = TrialRecord(
        flops=f.flops,
        flops_per_token=f.flops_per_token,
        params_non_embedding=f.params_non_embedding,
        params_embedding=f.params_embedding,
        eval_flops=f.eval_flops,
    )
    tps = r.get("tokens_per_s")
    name = gpu_name(kind, env or {}, str(r.get("device") or ""))
    peak = flops.device_peak(name, cfg.precision) if name else None
    if peak and isinstance(tps, (int, float)) and tps > 0 and tokens:
        out.gpu_name = name
        out.mfu = flops.mfu(f.flops, tokens / tps, peak)
    return out


def gpu_name(kind: str, env: dict[str, str], ran_on: str) -> str | None:
    """The product name of the GPU a CUDA child ran on (None on the CPU)."""
    if kind != "cuda" or not ran_on.startswith("cuda"):
        return None
    visible = env.get(host.VISIBLE_DEVICES_ENV, os.environ.get(host.VISIBLE_DEVICES_ENV))
    ids = [g.strip() for g in (visible or "").split(",") if g.strip()]
    index = host.cuda_index(ran_on)
    return host.gpu_name(ids[index] if index < len(ids) else str(index))


def objective_values(
    spec: StudySpec, attempt: Attempt, recorded: TrialRecord
) -> tuple[list[float], str | None]:
    """The study's objective values of a finished run, and the first one that is missing;
    ``recorded`` is the trial's record (``flops`` is computed once, there)."""
    r = attempt.result or {}
    final = r.get("final_metrics") or (attempt.history[-1] if attempt.history else {})
    source = {
        "val_bpb": final.get("val_bpb"),
        "val_loss": final.get("val_loss"),
        "peak_mem": r.get("peak_mem_bytes") or attempt.peak_rss,
        "wall_s": attempt.wall_s,
        "tokens_per_s": r.get("tokens_per_s"),
        "params": (r.get("params") or {}).get("total"),
        "flops": recorded.flops,
    }
    values = []
    for metric in spec.study.metrics:
        v = source.get(metric)
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return [], metric
        values.append(float(v))
    return values, None
