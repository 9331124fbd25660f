"""Helpers shared by the orchestrator tests: the 300 KB synthetic corpus of ``tests/shared.py``,
tiny spec values, a TOML writer, ``sweeps`` as a user runs it, and process and study probes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeps import records
from sweeps import storage as st
from sweeps.runner import (
    WorkerDevice,
)

#: A model that trains 4,000 tokens in well under a second.
TINY: dict[str, Any] = {
    "device": "cpu",
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "d_ff": 32,
    "seq_len": 16,
    "batch_size": 8,
    "max_tokens": 4000,
    "warmup_tokens": 500,
    "eval_every_tokens": 2000,
    "eval_tokens": 512,
    "sample_tokens": 4,
}


CPU = WorkerDevice("cpu", {"SWEEPS_NUM_THREADS": "1"}, None, "cpu")


#: ``sweeps`` as a user runs it.
SWEEPS = [sys.executable, "-m", "sweeps"]


#: Tiny models train fastest on one thread, above all on a busy machine.
CHILD_ENV = {"SWEEPS_NUM_THREADS": "1"}


def sweeps_run(
    *args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SWEEPS, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **CHILD_ENV, **(env or {})},
    )


def sweeps_popen(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SWEEPS, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **CHILD_ENV},
    )


def spec_dict(
    name: str,
    corpus: Path,
    *,
    fixed: dict | None = None,
    space: dict | None = None,
    study: dict | None = None,
    limits: dict | None = None,
    enqueue: list[dict] | None = None,
) -> dict[str, Any]:
    space = (
        space
        if space is not None
        else {"tokenizer": {"choices": ["word", "bpe"]}, "vocab_size": {"choices": [300, 600]}}
    )
    fixed = {k: v for k, v in {**TINY, **(fixed or {})}.items() if k not in space}
    data: dict[str, Any] = {
        "study": {
            "name": name,
            "sampler": "random",
            "seed": 0,
            "pruner": "none",
            "n_trials": 3,
            **(study or {}),
        },
        "corpus": {"dir": str(corpus)},
        "fixed": fixed,
        "space": space,
        "limits": {"memory_budget": "4GiB", "max_wall_s": 120, **(limits or {})},
    }
    if enqueue:
        data["enqueue"] = enqueue
    return data


def toml_text(data: dict[str, Any]) -> str:
    """Enough TOML for spec dicts: tables of scalars, lists, inline tables; arrays of tables."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        raise TypeError(v)

    def table(header: str, body: dict[str, Any]) -> None:
        lines.append(header)
        nested = {k: v for k, v in body.items() if isinstance(v, dict) and header == "[space]"}
        for k, v in body.items():
            if k not in nested:
                lines.append(f"{k} = {value(v)}")
        for k, v in nested.items():
            table(f"[space.{k}]", v)

    for key, body in data.items():
        if isinstance(body, list):
            for item in body:
                table(f"[[{key}]]", item)
        else:
            table(f"[{key}]", body)
    return "\n".join(lines) + "\n"


def lm_processes(under: Path) -> list[int]:
    """Training children and fork servers (by /proc, no psutil) whose cwd or arguments are
    under ``under``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(f"/proc/{entry}/cwd")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or not ("lm.train" in cmd or "sweeps.forkserver" in cmd):
            continue
        if str(under) in cmd or cwd.startswith(str(under)):
            found.append(int(entry))
    return found


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def study_trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    storage = st.open_storage(url)
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials()
    except KeyError:
        return []
    finally:
        storage.engine.dispose()


def running_with_evals(url: str, name: str, pid: int) -> int | None:
    """A RUNNING trial owned by process ``pid`` that has been evaluated at least once."""
    engine = sa.create_engine(st.normalize_url(url))
    try:
        try:
            hosts = [h for h in records.read_hosts(engine, name) if h["pid"] == pid]
        except sa.exc.OperationalError:  # the run has not created the tables yet
            return None
        running = {t.number for t in study_trials(url, name) if t.state == TrialState.RUNNING}
        for h in hosts:
            if h["trial_number"] in running and records.read_evals(engine, name, h["trial_number"]):
                return h["trial_number"]
        return None
    finally:
        engine.dispose()


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        out += kids
        frontier = kids
    return out


def environ_of(pid: int) -> dict[str, str]:
    """The environment process ``pid`` was started with (``/proc/PID/environ``)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if item)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def worker_study(spec: Any, db: Path) -> tuple[Any, optuna.Study]:
    """``spec``'s study on a SQLite file at ``db``, created or resumed as ``sweeps run`` does,
    with a short heartbeat (1 s) and grace (5 s) so a test sees a dead trial failed quickly:
    (storage, study) ready for ``sweeps.workers.run_workers``."""
    from sweeps import workers as wk

    storage = st.open_storage(
        f"sqlite:///{db}", heartbeat_interval=1, grace_period=5, max_retries=spec.limits.max_retries
    )
    wk.create_or_resume(spec, storage)
    return storage, wk.load_for_workers(spec, storage)


def snapshot(url: str, name: str) -> tuple[list, int, int, dict]:
    """(trials as (number, state, params, values, outcome), evaluations, samples, spec)."""
    storage = st.open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = [
            (t.number, t.state.name, t.params, t.values, t.user_attrs.get("outcome"))
            for t in study.get_trials()
        ]
        return (
            trials,
            len(records.read_evals(storage, name)),
            len(records.read_samples(storage, name)),
            study.user_attrs["spec"],
        )
    finally:
        storage.engine.dispose()
