"""A tabulated benchmark: finished trials of grid studies, whole curves and all, in one file.

``sweeps table export STUDY... --out FILE`` writes it (``export``); the replay engine
(``sweeps.engines.replay``) reads it back (``read``) and runs a study on it instead of training.
The file is gzip'd JSON lines, readable with the standard library alone (a loss that was not
finite is written ``NaN`` or ``Infinity``, as Python's ``json`` writes and reads it: the
divergence verdict reads it):

- line 1, the header: ``format`` (``FORMAT``) and ``version`` (``VERSION``), the studies it
  holds, and for each the spec's sections that define its grid (``GRID_KEYS``: the study (its
  sampler and objectives), the space, the fixed values, the corpus and the limits it ran under);
- then one line per finished trial (COMPLETE or PRUNED: a FAIL is the environment's and is run
  again; a copy of a repeated point is left out, its source stands for it): its study and
  number, its point (``params``: the seed among them when searched) and ``seed`` (the one it
  trained with), its outcome and reason, its objective ``values`` (complete only), the config
  it trained (``config``), its measured record (``RECORD_KEYS``: wall and
  training seconds, peak memory, FLOPs, ...), every evaluation (``evals``: each
  ``metrics.jsonl`` row as stored in ``sweeps_evals``, samples and the top-tokens table left
  out; ``elapsed_s`` is its seconds), and its cooldown reads (``reads``: the rows with
  ``read = "cooldown"``, taken from the trial's run dir, where the runner keeps them: they are
  judged but not stored as evaluations) with the values its judge posted at each rung
  (``rungs``, ``rung_tokens``).

What the verdicts would have said is not written: a table study runs with the verdicts off, and
each evaluation row keeps every statistic they read (``mean_kl_to_mean``,
``kl_mean_to_unigram``, ``unigram_gap``, ``lr_sum``, ...), so the replay's judge reaches them
under whatever ``[limits]`` the replayed spec sets (this module reads storage only and applies
no rule).
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm.errors import SweepsError, closest
from lm.run_files import METRICS_FILE, READ_COOLDOWN
from sweeps import record as rc
from sweeps import records
from sweeps import storage as st

FORMAT = "sweeps-table"
#: Bumped when a reader of the previous version would misread the file.
VERSION = 1
#: The spec's sections that say what a point of the table trained (its grid).
GRID_KEYS = ("study", "space", "fixed", "corpus", "limits")
#: What the table keeps of a trial's record: what it measured, not where it ran.
RECORD_KEYS = rc.names(
    "wall_s",
    "train_s",
    "setup_s",
    "cold_start_s",
    "peak_mem_bytes",
    "peak_mem_kind",
    "predicted_mem_bytes",
    "flops",
    "predicted_flops",
    "flops_per_token",
    "eval_flops",
    "params_total",
    "params_non_embedding",
    "params_embedding",
    "params",
    "tokens_seen",
    "tokens_per_s",
    "train_bytes",
    "bytes_per_token",
    "steps",
    "planned_steps",
    "best_val_bpb",
    "under_trained",
    "threads",
    "device",
    *rc.FINAL_METRICS,
)
#: Evaluation keys left out: text and tables the replay never judges (kilobytes a row).
DROPPED_EVAL_KEYS = ("samples", "top_tokens")
#: The table's states: a trial that finished as its configuration made it.
FINISHED_STATES = ("COMPLETE", "PRUNED")


@dataclass
class TableTrial:
    """One finished trial of the table."""

    study: str
    number: int
    params: dict[str, Any]
    outcome: str
    reason: str
    state: str
    seed: int | None = None
    values: list[float] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    evals: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    rungs: dict[str, Any] = field(default_factory=dict)
    rung_tokens: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableTrial:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Table:
    """A table read back: its header and its trials, found by point (``find``)."""

    header: dict[str, Any]
    trials: list[TableTrial]
    source: str = "the table"

    def __post_init__(self) -> None:
        # A point held twice (two studies of one grid): the first trial holding it stands.
        self.by_point: dict[tuple[tuple[str, str], ...], TableTrial] = {}
        for t in self.trials:
            self.by_point.setdefault(point_key(t.params), t)

    def grid(self, study: str | None = None) -> dict[str, Any]:
        """The grid fields of ``study`` (default: the first study of the table)."""
        grids = self.header.get("grids") or {}
        if study is None:
            return next(iter(grids.values()), {})
        return dict(grids.get(study) or {})

    def find(self, params: Mapping[str, Any]) -> TableTrial:
        """The trial at ``params``; a point the table does not hold is one line naming the
        nearest it does."""
        found = self.by_point.get(point_key(params))
        if found is not None:
            return found
        near = nearest(params, [t.params for t in self.trials])
        raise SweepsError(
            f"the point {shown_point(params)} is not in {self.source}; the nearest it holds is "
            f"{shown_point(near) if near is not None else 'none (it is empty)'}: replay a spec "
            "whose space is the table's grid"
        )


def point_key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A point as a key: its parameters by name, each value as JSON (1 and 1.0 differ, as they
    do to a config)."""
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in params.items()))


def shown_point(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(params.items())) or "(no parameters)"


def distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How far two points are: per parameter, the gap in log10 between positive numbers, the
    plain gap between other numbers, 1 between other values that differ or are missing."""
    out = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x == y and type(x) is type(y):
            continue
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
        if numbers and x > 0 and y > 0:  # type: ignore[operator]  # numbers, checked above
            out += abs(math.log10(x) - math.log10(y))  # type: ignore[arg-type]
        elif numbers:
            out += abs(float(x) - float(y))  # type: ignore[arg-type]
        else:
            out += 1.0
    return out


def nearest(
    params: Mapping[str, Any], points: Iterable[Mapping[str, Any]]
) -> dict[str, Any] | None:
    best = min(points, key=lambda p: distance(params, p), default=None)
    return None if best is None else dict(best)


# --- export ------------------------------------------------------------------------------------


def grid_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a stored spec (``record.STUDY_SPEC``) defines its grid."""
    return {k: spec[k] for k in GRID_KEYS if spec.get(k) is not None}


def cooldown_reads(run_dir: str | None) -> list[dict[str, Any]] | None:
    """The cooldown reads in a trial's ``metrics.jsonl`` (None when its run dir is gone)."""
    if not run_dir:
        return None
    path = Path(run_dir) / METRICS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    out = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("read") == READ_COOLDOWN:
            out.append(_eval_row(row))
    return out


def _eval_row(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k not in DROPPED_EVAL_KEYS}


def study_trials(url: str, name: str) -> tuple[dict[str, Any], list[TableTrial], int]:
    """(the study's grid fields, its finished trials, how many of them had no run dir to
    read cooldown reads from) from storage, read-only."""
    import optuna

    storage = st.read_only_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        hint = closest(name, known)
        raise SweepsError(
            f"study {name!r} is not in {st.mask_url(url)}"
            + (f" (did you mean {hint!r}?)" if hint else "")
            + "; check the name or --storage"
        ) from None
    spec = study.user_attrs.get(rc.STUDY_SPEC) or {}
    evals: dict[int, list[dict[str, Any]]] = {}
    for row in records.read_evals(storage, name):
        evals.setdefault(int(row["trial_number"]), []).append(_eval_row(row["metrics"]))
    out, no_reads = [], 0
    for t in study.get_trials(deepcopy=False):
        if t.state.name not in FINISHED_STATES:
            continue
        rec = rc.TrialRecord.from_trial(t)
        if rec.copy_of is not None:  # a repeated point's copy: its source is the table's line
            continue
        reads = cooldown_reads(rec.run_dir)
        no_reads += reads is None
        config = dict(rec.config or {})
        out.append(
            TableTrial(
                study=name,
                number=t.number,
                params=dict(t.params),
                outcome=str(rec.outcome or t.state.name.lower()),
                reason=str(rec.reason or ""),
                state=t.state.name,
                seed=config.get("seed"),
                values=list(t.values) if t.state.name == "COMPLETE" and t.values else None,
                config=config,
                record={k: rec.get(k) for k in RECORD_KEYS if rec.get(k) is not None},
                evals=evals.get(t.number, []),
                reads=reads or [],
                rungs=dict(rec.rungs or {}),
                rung_tokens=dict(rec.rung_tokens or {}),
            )
        )
    return grid_fields(spec), out, no_reads


def export(url: str, names: Sequence[str], out: Path) -> tuple[int, int]:
    """Write the studies' finished trials to ``out`` (see the module docstring); (trials
    written, trials whose cooldown reads could not be read: their run dir is gone)."""
    grids, trials, missing = {}, [], 0
    for name in names:
        grid, found, gone = study_trials(url, name)
        grids[name], missing = grid, missing + gone
        trials += found
    header = {
        "studies": list(names),
        "grids": grids,
        "verdicts": "not written: the replay's judge reaches them from each evaluation's row",
        "reads_missing": missing,
    }
    write(out, header, trials)
    return len(trials), missing


def write(out: Path, header: Mapping[str, Any], trials: Sequence[TableTrial]) -> Path:
    """Write a table: ``header`` (with the format, its version and the count) and ``trials``."""
    from lm.files import write_output

    head = {**header, "format": FORMAT, "version": VERSION, "trials": len(trials)}
    buffer = io.BytesIO()
    # mtime 0: the same trials make the same bytes (a committed table diffs only when it changes)
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
        for item in (head, *(t.to_json() for t in trials)):
            gz.write((json.dumps(item, sort_keys=True) + "\n").encode("utf-8"))
    return write_output(out, lambda f: f.write(buffer.getvalue()))


# --- reading -----------------------------------------------------------------------------------


def read(path: Path) -> Table:
    """The table in ``path``; one line when it is missing, not a table, or of another version."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise SweepsError(f"--table {path}: cannot read it ({exc})") from None
    try:
        header = json.loads(lines[0]) if lines else {}
        trials = [TableTrial.from_json(json.loads(line)) for line in lines[1:] if line]
    except (ValueError, TypeError) as exc:
        raise SweepsError(f"--table {path}: not a table of `sweeps table export` ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SweepsError(f"--table {path}: not a table of `sweeps table export`")
    if header.get("version") != VERSION:
        raise SweepsError(
            f"--table {path}: format version {header.get('version')!r}, this sweeps reads "
            f"version {VERSION}; export it again with this version"
        )
    return Table(header, trials, source=f"--table {path}")
