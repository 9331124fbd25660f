"""The files of one trial's run directory: the contract between the trial child and the parent.

The child (``lm.train``) writes them and the orchestrator (``sweeps.runner``) reads them; it
reads files and never parses log text. Both import this module, which imports no torch (the
orchestrator must not).

- ``config.json`` (``CONFIG_FILE``): the full ``TrainConfig`` (every field, defaults included).
- ``tokenizer.json`` (``TOKENIZER_FILE``): the run's tokenizer, so generation needs nothing but
  the run dir.
- ``metrics.jsonl`` (``METRICS_FILE``): one JSON object per evaluation (keys: ``METRIC_KEYS``),
  flushed as written (``append_metrics``). A cooldown read's evaluation (``lm.cooldown``) is one
  too, with the keys of ``READ_TYPES`` added (``"read": "cooldown"``): it measures a branch,
  not the run, whose own evaluations are the lines without ``read``.
- ``best.pt`` (``CHECKPOINT_FILE``): weights only (``torch.load(..., weights_only=True)``) of the
  best evaluation: ``{"state_dict", "fingerprint", "model_config", "tokens", "val_bpb"}``.
- ``resume.pt`` (``RESUME_FILE``): what continuing the run needs, taken at an evaluation every
  ``checkpoint_every_tokens`` (``lm.train``), weights-only loadable: ``{"resume_fingerprint",
  "config", "tokens", "step", "model", "optimizer", "scaler", "sampler", "torch_rng",
  "cuda_rng", "next_eval", "train_wall_s", "train_s", "n_evals", "best_val_bpb", "best_tokens",
  "last_metrics", "cooldown_tokens_total", "n_reads", "schedule"}`` (``schedule``: the rate's
  fields, ``lm.config.SCHEDULE_FIELDS``, which the resume fingerprint covers too). Removed
  when the run completes or diverges (nothing is left to resume).
- ``resume.json`` (``RESUME_INDEX_FILE``): ``{"resume_fingerprint", "tokens"}`` of the
  checkpoint being written, for the orchestrator, which reads no torch files. Written before
  ``resume.pt``, so its tokens are never behind the checkpoint's.
- ``result.json`` (``RESULT_FILE``): the ``RunResult``, written atomically at the end whatever
  the outcome (``write_result``). Exit codes are in ``lm/outcomes.py``.
- ``train.log`` (``LOG_FILE``): the child's stdout and stderr, captured by the parent; for people
  only (a reason may quote its last line; no outcome depends on it).
- ``progress.json`` (``PROGRESS_FILE``): ``{"tokens", "max_tokens"}``, rewritten
  atomically about once a second while the child trains (``ProgressFile``), so the parent's
  live board advances between evaluations.

When the orchestrator's verdict differs from what the child reported (a collapse judged at the
last evaluation, a prune, a timeout), the parent rewrites ``result.json`` with its outcome and
reason, keeps the child's own as ``child_outcome``/``child_reason``, and appends the verdict to
``train.log`` (``record_verdict``): the run dir tells the same story as the database.

Non-finite floats are written as ``null`` (``jsonable``) so every file is strict JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lm.config import TrainConfig
from lm.errors import SweepsError
from lm.files import _replace_with, write_json_atomic

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
CHECKPOINT_FILE = "best.pt"
RESUME_FILE = "resume.pt"
RESUME_INDEX_FILE = "resume.json"
LOG_FILE = "train.log"
PROGRESS_FILE = "progress.json"

#: Keys of each ``metrics.jsonl`` object, in order, with the type of their value (``float``: any
#: finite number; every value may also be None, a non-finite number written as null).
METRIC_TYPES: dict[str, type] = {
    "step": int,
    "tokens": int,
    "lr": float,
    "lr_sum": float,
    "train_bytes": int,
    "train_loss": float,
    "val_loss": float,
    "val_bpb": float,
    "accuracy": float,
    "unigram_entropy": float,
    "unigram_bpb": float,
    "unigram_gap": float,
    "kl_mean_to_unigram": float,
    "mean_kl_to_mean": float,
    "top20_overlap": float,
    "top_tokens": dict,
    "unk_rate_targets": float,
    "unk_argmax_rate": float,
    "unk_byte_rate": float,
    "unk_rate_samples": float,
    "samples": list,
    "peak_mem_bytes": int,
    "tokens_per_s": float,
    "elapsed_s": float,
}
METRIC_KEYS = tuple(METRIC_TYPES)
#: What a cooldown read's line (``lm.cooldown``) adds to those keys: ``read`` is
#: ``READ_COOLDOWN``, ``cooldown_tokens`` the tokens its branch trained (after ``tokens``).
READ_TYPES: dict[str, type] = {"read": str, "cooldown_tokens": int}
READ_COOLDOWN = "cooldown"


def jsonable(value: Any) -> Any:
    """``value`` with NaN/inf floats replaced by None and dict keys as strings (strict JSON), so
    it survives every file, the database and the reports."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


@dataclass
class RunResult:
    """What ``result.json`` holds; ``exit_code`` is the child's (``lm/outcomes.py``)."""

    outcome: str
    reason: str
    exit_code: int
    tokens_seen: int = 0
    #: Bytes of training text those tokens stand for (the training split's bytes per token).
    train_bytes: int | None = None
    steps: int = 0
    #: Tokens the branches of cooldown reads trained (``lm.cooldown``), beside ``tokens_seen``:
    #: the trial's compute is both (``lm.flops.trained``).
    cooldown_tokens_total: int = 0
    #: Cooldown reads taken (their evaluations are not in ``n_evals``).
    n_reads: int = 0
    wall_s: float = 0.0
    tokens_per_s: float = 0.0
    peak_mem_bytes: int = 0
    #: What ``peak_mem_bytes`` measures (``lm.memory.peak_kind``): CUDA tensors, or the CPU
    #: child's whole anonymous peak.
    peak_mem_kind: str | None = None
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
    #: The intra-op threads it trained on (``lm.host.run_threads``); None: not set up.
    threads: int | None = None
    fingerprint: str = ""
    traceback: str | None = None
    #: The environment failed the run (``lm/outcomes.py`` ``ENVIRONMENT_EXIT_CODE``).
    environment: bool = False
    #: The tokens of the resume checkpoint this run continued (0: it started from scratch).
    resumed_from_tokens: int = 0
    #: What the child itself reported, when the orchestrator's verdict replaced it
    #: (``record_verdict``); None when the two agree.
    child_outcome: str | None = None
    child_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return cast(dict[str, Any], jsonable(dataclasses.asdict(self)))  # a dict stays a dict

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunResult:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


# --- the child writes ----------------------------------------------------------------------------


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    """``config.json``: every field of ``cfg``, defaults included, atomically."""
    write_json_atomic(Path(run_dir) / CONFIG_FILE, jsonable(cfg.to_dict()), indent=2)


def append_metrics(run_dir: Path, row: dict[str, Any]) -> dict[str, Any]:
    """Append one evaluation to ``metrics.jsonl`` (one line, flushed on close); returns the row
    as written (non-finite floats as None)."""
    row = jsonable(row)
    with open(Path(run_dir) / METRICS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, allow_nan=False) + "\n")
    return row


def write_result(run_dir: Path, result: RunResult) -> None:
    """``result.json``, atomically: the parent never reads half a result."""
    write_json_atomic(Path(run_dir) / RESULT_FILE, result.to_dict(), indent=2)


class ProgressFile:
    """``progress(done, total)`` for ``lm.train.run`` that writes ``progress.json``: at most
    every ``every_s`` seconds (an atomic rename per step would cost more than a tiny model's
    step), and always at the end of the budget."""

    def __init__(self, run_dir: Path, every_s: float = 1.0) -> None:
        self.path = Path(run_dir) / PROGRESS_FILE
        self.every_s = every_s
        self.written_at: float | None = None

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and self.written_at is not None and now - self.written_at < self.every_s:
            return
        self.written_at = now
        # A display only: a full disk is for the metrics and checkpoints to report.
        with contextlib.suppress(OSError):
            write_json_atomic(self.path, {"tokens": int(done), "max_tokens": int(total)})


def read_progress_tokens(run_dir: Path) -> int | None:
    """The tokens ``progress.json`` says the child has trained, or None (not yet written, or
    not a well-formed count: it only feeds a display)."""
    try:
        value = loads_child((Path(run_dir) / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    tokens = value.get("tokens") if isinstance(value, dict) else None
    return (
        tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None
    )


def record_verdict(run_dir: Path, outcome: str, reason: str) -> bool:
    """Write the orchestrator's verdict into the run's own ``result.json`` (the child's outcome
    and reason kept as ``child_outcome``/``child_reason``) and append it to ``train.log``, when
    it differs from what the child reported. False when there is nothing to amend (no readable
    result, or the same outcome)."""
    path = Path(run_dir) / RESULT_FILE
    try:
        value = loads_child(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(value, dict) or value.get("outcome") == outcome:
        return False
    value.setdefault("child_outcome", value.get("outcome"))
    value.setdefault("child_reason", value.get("reason"))
    value.update(outcome=outcome, reason=reason)
    write_json_atomic(path, jsonable(value), indent=2)
    with open(Path(run_dir) / LOG_FILE, "a", encoding="utf-8") as fh:
        fh.write(
            f"sweeps verdict: {outcome}: {reason} (the child reported {value['child_outcome']})\n"
        )
    return True


def write_resume_index(run_dir: Path, resume_fingerprint: str, tokens: int) -> None:
    """``resume.json``: which configuration the next ``resume.pt`` continues, and where."""
    write_json_atomic(
        Path(run_dir) / RESUME_INDEX_FILE,
        {"resume_fingerprint": resume_fingerprint, "tokens": tokens},
    )


def read_resume_index(run_dir: Path) -> dict[str, Any] | None:
    """``resume.json`` beside an existing ``resume.pt``, or None (no checkpoint, or an index
    that is not ours)."""
    run_dir = Path(run_dir)
    try:
        value = loads_child((run_dir / RESUME_INDEX_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not (run_dir / RESUME_FILE).is_file()
        or not isinstance(value, dict)
        or not isinstance(value.get("resume_fingerprint"), str)
        or not _fits(value.get("tokens"), int)
        or value.get("tokens") is None
    ):
        return None
    return value


def keep_metrics_until(source: Path, tokens: int, into: Path | None = None) -> int:
    """Write the ``metrics.jsonl`` lines of run dir ``source`` up to ``tokens`` (an evaluation
    at or before a resume checkpoint) into run dir ``into`` (default: ``source``, rewritten only
    when a line is dropped); the first line beyond them, or unreadable (a write cut short),
    ends them. Returns how many were kept."""
    path = Path(source) / METRICS_FILE
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        lines = []
    kept = []
    for line in lines:
        try:
            row = loads_child(line)
        except ValueError:
            break
        if (
            not isinstance(row, dict)
            or not _fits(row.get("tokens"), int)
            or row.get("tokens") is None
            or row["tokens"] > tokens
        ):
            break
        kept.append(line + b"\n")
    target = Path(into or source) / METRICS_FILE
    if into is not None or len(kept) < sum(1 for line in lines if line.strip()):
        _replace_with(target, lambda fh: fh.write(b"".join(kept)), mode=0o644)
    return len(kept)


# --- what the parent accepts from a child --------------------------------------------------------


#: A child's integers must fit a BIGINT column (SQLite's INTEGER, PostgreSQL's bigint): a larger
#: one (``"step": 99999999999999999999``) stopped the orchestrator on both backends.
_BIGINT = 2**63
#: How deep a child's JSON may nest. Deeper, the parser (200,000 ``[``: RecursionError) or any
#: later serializer, called from further down the stack, would fail; a metrics row is flat.
MAX_CHILD_DEPTH = 32


def loads_child(text: str | bytes) -> Any:
    """A child's JSON as the parent may hold it; ValueError for text that is not JSON (a number
    over 4,300 digits included), or that nests deeper than ``MAX_CHILD_DEPTH``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    pending = [(value, 0)]
    while pending:  # a loop, not recursion: this check must not fail the way the parser did
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            if depth >= MAX_CHILD_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_CHILD_DEPTH} levels")
            pending += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return value


def _fits(value: Any, kind: type) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return (isinstance(value, float) and math.isfinite(value)) or (
            isinstance(value, int) and -_BIGINT <= value < _BIGINT
        )
    if kind is int:
        return isinstance(value, int) and -_BIGINT <= value < _BIGINT
    return isinstance(value, kind)


def _samples(value: list[Any]) -> list[dict[str, str]]:
    return [
        v
        for v in value
        if isinstance(v, dict)
        and isinstance(v.get("prompt"), str)
        and isinstance(v.get("text"), str)
    ]


def check_metrics_row(value: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """One ``metrics.jsonl`` object as the parent may use it, and what was wrong with it: not an
    object -> None (the line is skipped); a known key with a value of the wrong type -> the key
    is dropped (the row is judged on what is valid); unknown keys are kept as they are."""
    if not isinstance(value, dict):
        return None, [f"a {METRICS_FILE} line is {type(value).__name__}, not an object"]
    row, problems = {}, []
    for key, v in value.items():
        kind = METRIC_TYPES.get(key) or READ_TYPES.get(key)
        if kind is None or _fits(v, kind):
            row[key] = _samples(v) if key == "samples" and v is not None else v
        else:
            problems.append(_wrong(key, v, kind))
    return row, problems


def _result_types() -> dict[str, type]:
    """The type of each ``RunResult`` field's value, from the dataclass itself."""
    simple: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict}
    out: dict[str, type] = {}
    for f in dataclasses.fields(RunResult):
        name = str(f.type).split(" | ")[0].split("[")[0]
        out[f.name] = simple.get(name, object)
    return out


def check_result(value: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """``result.json`` as the parent may use it: an object with a string ``outcome``, else None
    (the parent then goes by the exit code); a field of the wrong type is dropped and named, and
    ``final_metrics`` is checked as a metrics row."""
    if not isinstance(value, dict) or not isinstance(value.get("outcome"), str):
        return None, [] if value is None else [f"{RESULT_FILE} holds no outcome"]
    types = _result_types()
    out, problems = {}, []
    for key, v in value.items():
        kind = types.get(key, object)
        if key == "final_metrics" and v is not None:
            v, more = check_metrics_row(v)
            problems += [f"final_metrics: {p}" for p in more]
        elif not _fits(v, kind):
            problems.append(_wrong(key, v, kind))
            continue
        out[key] = v
    return out, problems


def _wrong(key: str, value: Any, kind: type) -> str:
    text = repr(value)
    shown = text if len(text) <= 40 else text[:37] + "..."
    return f"{key}={shown} is not {'a number' if kind is float else 'a ' + kind.__name__}"


# --- readers -------------------------------------------------------------------------------------


def read_result(run_dir: Path) -> RunResult:
    """The ``result.json`` of a finished run (``SweepsError`` if missing or invalid)."""
    path = Path(run_dir) / RESULT_FILE
    try:
        return RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise SweepsError(f"{path} does not exist; the run has not finished") from None
    except (json.JSONDecodeError, TypeError) as exc:
        raise SweepsError(f"{path} is not a valid result file: {exc}") from None


def read_result_dict(run_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The orchestrator's lenient read: ``result.json`` checked (``check_result``), or None when
    it is missing, unreadable or has no ``outcome`` (a child killed before writing it; the
    parent then goes by the exit code); and what was wrong with it."""
    try:
        value = loads_child((Path(run_dir) / RESULT_FILE).read_text(encoding="utf-8"))
    except OSError:
        return None, []
    except ValueError as exc:  # not JSON, or nested too deeply (UnicodeDecodeError is one)
        return None, [f"{RESULT_FILE} is not valid JSON ({str(exc)[:200]})"]
    return check_result(value)


def read_config(run_dir: Path) -> TrainConfig:
    """``run_dir/config.json`` as a ``TrainConfig`` (``SweepsError`` if missing or invalid)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise SweepsError(f"{path} does not exist; give a run directory holding a {CONFIG_FILE}")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SweepsError(f"{path} is not valid JSON ({exc}); rewrite it") from None
    try:
        return TrainConfig.from_dict(values)
    except SweepsError as exc:
        raise SweepsError(f"{path}: {exc}") from None
