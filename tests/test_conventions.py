"""The project's conventions, checked on the source tree: one definition for each shared fact,
short functions, tests that do not import each other or install system packages."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lm", "sweeps")
MAX_FUNCTION_LINES = 100


def sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py"))


def where(pattern: str, *dirs: str, flags: int = 0) -> list[str]:
    """``path:line`` of every line of the sources under ``dirs`` that matches ``pattern``."""
    rx = re.compile(pattern, flags)
    return [f"{p.relative_to(REPO)}:{i}" for p in sources(*dirs)
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if rx.search(line)]


@pytest.mark.parametrize(("fact", "pattern", "home"), [
    # the trial's file names: lm/run_files.py
    ("trial file names", r'"(config\.json|metrics\.jsonl|result\.json|best\.pt|train\.log|'
     r'resume\.pt|resume\.json|progress\.json)"',
     "lm/run_files.py"),
    # the outcome names, as string literals, outside the vocabulary
    ("outcome names", r'"(predicted_oom|unigram_collapse|interrupted|crashed|diverged)"',
     "lm/outcomes.py"),
    # reading SWEEPS_NUM_THREADS
    ("SWEEPS_NUM_THREADS parsing", r'environ\.get\(\s*"SWEEPS_NUM_THREADS"|'
     r'environ\[\s*"SWEEPS_NUM_THREADS"', "lm/host.py"),
    # how "auto" picks a device
    ("the auto device rule", r'(device|name)\s*==\s*"auto"|nvidia-smi -L|\["nvidia-smi"|'
     r"/proc/driver/nvidia|cuda\.is_available\(\)", "lm/host.py"),
    # GPU facts of this host: device order, the MPS daemon's pipe, nvidia-smi's memory query
    ("the GPU environment", r'"CUDA_DEVICE_ORDER"|"PCI_BUS_ID"|"CUDA_MPS_PIPE_DIRECTORY"|'
     r'memory\.free', "lm/host.py"),
    # what a measured peak is
    ("peak kinds", r'"(cpu_peak_anon|cuda_max_allocated|host_rss)"', "lm/memory.py"),
    # Optuna's internals: its private modules (the RDB table models, alembic, sessions), a
    # trial's storage id, and underscore attributes of its storages, studies and trials
    ("Optuna internals", r"optuna(\.\w+)*\._\w|\b_rdb\b|\bmodels\.\w+Model\b|"
     r"\b(rdb|storage|study|trial|frozen|t|st)\._[a-z]\w*|\._(trial_id|study_id|max_retry)\b",
     "sweeps/optuna_compat.py"),
])
def test_each_fact_has_one_definition(fact: str, pattern: str, home: str) -> None:
    found = [w for w in where(pattern, *PACKAGES) if not w.startswith(home + ":")]
    allowed = ALLOWED.get(fact, ())
    assert [w for w in found if not any(w.startswith(a) for a in allowed)] == [], fact


#: Places that use a fact without defining it: the training child must ask torch whether CUDA
#: really works before it uses a device the host module picked.
ALLOWED: dict[str, tuple[str, ...]] = {
    "the auto device rule": ("lm/runtime.py", "lm/memory.py"),
}


def test_no_function_longer_than_100_lines() -> None:
    long = []
    for path in sources(*PACKAGES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_every_package_opens_with_a_docstring() -> None:
    missing = [str(p.relative_to(REPO)) for p in sources(*PACKAGES) if p.name == "__init__.py"
               and ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) is None]
    assert missing == []


def test_no_test_imports_another_test_module() -> None:
    assert where(r"^\s*(from|import) tests\.\S*\.test_\w+", "tests") == []


def test_no_test_installs_system_packages() -> None:
    """System packages come from the set-up step (`make system-packages`): a test that runs
    apt-get fails on someone else's package lock."""
    here = str(Path(__file__).relative_to(REPO))
    assert [w for w in where(r"apt-get|\bapt\b.*install|dpkg", "tests")
            if not w.startswith(here)] == []
