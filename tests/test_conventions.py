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
    # the walk over a conditional space: the one place that evaluates a parameter's condition
    ("the walk over conditions", r"\.when\.holds\(", "sweeps/spec/walk.py"),
    # TrainConfig's vocab_size default, as a number next to "vocab" or "default"
    ("the vocab_size default", r"(vocab|default).*\b4096\b", "lm/config.py"),
    # a process's memory as the kernel reports it (the parent samples its child through it too)
    ("process memory from /proc", r"/proc/[^/\s\"']+/(status|statm|smaps)", "lm/rss.py"),
    # the default heartbeat: the CLI's options, the workers and the engines share two numbers
    ("the default heartbeat", r"(HEARTBEAT_INTERVAL_S|GRACE_PERIOD_S)\s*=", "sweeps/heartbeats.py"),
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


def test_the_spec_imports_no_higher_module() -> None:
    """``sweeps.spec`` is below the modules that use it: none of its modules imports another
    ``sweeps`` module inside a function (an import there would hide a cycle, such as the types
    reaching up into ``sweeps.fidelity`` or the reader), nor ``sweeps.fidelity`` at all."""
    found = []
    for path in sources("sweeps/spec"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        inner = {id(i) for f in functions for i in ast.walk(f)
                 if isinstance(i, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names]
            for name in names:
                upward = id(node) in inner and (name == "sweeps" or name.startswith("sweeps."))
                if upward or name == "sweeps.fidelity":
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    assert found == []


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


def test_the_verdicts_module_is_sweeps_verdicts() -> None:
    """The project's verdicts live in ``sweeps/verdicts.py``; the pruners are Optuna's
    (``sweeps.space.make_pruner``) and halving (``sweeps.fidelity``), composed by
    ``sweeps.judge``: no module is called ``pruning``, and nothing names one."""
    assert [p for p in sources(*PACKAGES, "tests") if p.stem in ("pruning", "test_pruning")] == []
    pattern = r"\bsweeps[./]pruning\b|from sweeps import [\w, ]*\bpruning\b|\bpruning\.py\b"
    assert where(pattern, *PACKAGES, "tests") == []
    docs = [REPO / "README.md", *sorted((REPO / "studies").rglob("*.md"))]
    assert [str(d.relative_to(REPO)) for d in docs
            if re.search(pattern, d.read_text(encoding="utf-8"))] == []


MAX_MODULE_LINES = 800


def test_no_module_longer_than_800_lines() -> None:
    long = [f"{p.relative_to(REPO)} ({n} lines)" for p in sources(*PACKAGES)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert long == []


def _module_names() -> dict[str, Path]:
    out = {}
    for p in sources(*PACKAGES):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its code (function-level imports too:
    a cycle dodged by importing inside a function is still a cycle), less imports under ``if
    TYPE_CHECKING:`` (never run) and a module's imports of its own package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = [f"{node.module}.{a.name}" for a in node.names
                    if f"{node.module}.{a.name}" in modules]
            targets = subs if len(subs) == len(node.names) else [node.module, *subs]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def test_no_import_cycle() -> None:
    """Layers run one way: no two modules import each other, directly or through others, even
    inside functions."""
    modules = _module_names()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join((*path, start)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*path, nxt)))
    assert cycles == []
