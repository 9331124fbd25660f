"""The GPU acceptance kit's driver: one command, a fixed plan of timed steps, one summary.

``tests/gpu/run.sh [OUTDIR]`` calls ``python3 tests/gpu/kit.py run --out OUTDIR``. A GPU session
has 15 minutes of device time, every try together, so the kit is one prepared command of at
most ``TOTAL_BUDGET_S``: each step runs under its own budget (a ``timeout``: a slow step ends
as ``fail`` with the reason and cannot eat the next one's time), and ``summary.json`` is
rewritten after every step, so even a kit killed from outside leaves what it measured.

What comes back from the device is at most 8 files: OUTDIR holds ``log.txt`` (every step's
output), ``summary.json`` (per step: status ``pass``/``fail``/``skip``, its reason, numbers,
seconds, budget; the packing and fusion steps' figures are there only) and the steps' own
files (``pytest.xml``, ``memory.json``, ``throughput.json``, ``report.html``). Working files
(corpora, databases, run dirs) go to a temporary folder that does not come back.

Without CUDA (``torch.cuda.is_available()`` false in a child interpreter; the driver itself
imports no torch and never initializes CUDA) every GPU step is skipped with that reason: the
CPU suite runs the kit that way (``tests/gpu/test_kit.py``), so it cannot rot between GPU
sessions.

    python3 tests/gpu/kit.py plan
    python3 tests/gpu/kit.py run [--out DIR] [--wheels DIR] [--site DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import wheelset  # noqa: E402

#: The whole kit's limit: a GPU session's 15 minutes less a machine's start and one retry.
TOTAL_BUDGET_S = 480
#: What the driver itself may take between steps (summaries, logs): the steps' budgets sum to at
#: most TOTAL_BUDGET_S less this (test_kit.py checks it).
DRIVER_S = 5
#: Seconds between SIGTERM and SIGKILL when a step runs out of time (its children tidy up). A
#: command is stopped 2 x GRACE_S before its step's deadline, so even one that ignores SIGTERM
#: is gone by the deadline: no step overruns its budget.
GRACE_S = 3
#: Targets the summary judges against (studies/gpu/README.md).
MEMORY_TARGET = 0.10  # |predicted / measured - 1| for every point of the GPU grid
THROUGHPUT_TARGET = 0.95  # lm.train.run's tokens/s over the hand-written loop's
#: Where the classic step looks for a real dump, in order (the device gets only the repo).
DUMP_DIRS = (
    REPO / "shared" / "data" / "stackexchange",
    REPO.parent / "shared" / "data" / "stackexchange",
)
#: The dump the studies' findings were measured on, taken first when there are several.
PREFERRED_DUMP = "history.Posts.xml"
CLASSIC_SPEC = REPO / "studies" / "classic_parenting.toml"
KIT_SPEC = HERE / "study.toml"


@dataclass(frozen=True)
class Step:
    name: str
    budget_s: int
    needs_cuda: bool
    what: str


#: The plan, in order. The budgets sum to at most TOTAL_BUDGET_S - DRIVER_S (test_kit.py).
STEPS = (
    Step("env", 20, False, "python, torch, CUDA and the GPU as this host has them (nvidia-smi)"),
    Step("wheels", 25, False, "check the carried .whl/ set and pip-install it --no-index"),
    Step(
        "pytest",
        85,
        True,
        "pytest -m gpu tests/gpu: fp16/bf16 against fp32, OOM then a "
        "trial (its memory released), fork-server children on CUDA, "
        "CUDA_VISIBLE_DEVICES, a run over its reservation ends oom",
    ),
    Step(
        "memory",
        100,
        True,
        "bench_memory --device cuda --configs gpu: predicted allocated "
        "against torch.cuda.max_memory_allocated, worst ratio",
    ),
    Step(
        "throughput",
        60,
        True,
        "bench_train --device cuda: lm.train.run against a hand loop "
        "(d_model 768, 12 layers, T 1024, bf16), tokens/s and MFU",
    ),
    Step(
        "study",
        45,
        True,
        "tests/gpu/study.toml end to end (device cuda, budget auto), its "
        "trials and `sweeps report`",
    ),
    Step(
        "packing",
        60,
        True,
        "bench_packing --device cuda: trials per hour of 16 small trials "
        "one at a time against packed by memory, and whether MPS runs",
    ),
    Step(
        "fusion",
        25,
        True,
        "bench_fusion: K models fused into one batched model against K "
        "one after another, steps/s at d_model 32/64/128, K 1/4/16, bf16",
    ),
    Step(
        "classic",
        55,
        True,
        "studies/classic_parenting.toml's baseline (word 300, d_ff 1, "
        "batch 1000 x 254) on a real dump: outcome, reason, steps",
    ),
)
#: Why a CUDA step is skipped when the env step found no device.
NO_CUDA = "no CUDA device: torch.cuda.is_available() is False"


@dataclass
class Outcome:
    status: str  # pass, fail or skip
    reason: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Kit:
    out: Path
    work: Path
    wheels: Path
    site: Path
    log: Any = None
    cuda: bool = False
    #: Why the CUDA steps are skipped when ``cuda`` is False: no device, or the env step's
    #: probe itself failed (then nothing is known about the device).
    no_cuda: str = NO_CUDA
    env: dict[str, str] = field(default_factory=dict)
    deadline: float = 0.0  # the current step's, time.monotonic()

    def say(self, text: str) -> None:
        print(text, flush=True)
        if self.log is not None:
            self.log.write(text + "\n")
            self.log.flush()

    def sh(self, argv: list[str], *, cwd: Path = REPO) -> tuple[int, str]:
        """Run ``argv`` until the step's deadline; its output into the log. rc 124: timed out."""
        self.say("$ " + " ".join(argv))
        # Stopping takes up to 2 x GRACE_S (SIGTERM, then SIGKILL): keep that before the deadline.
        left = self.deadline - time.monotonic() - 2 * GRACE_S
        if left < 1:
            return 124, "no time left in the step's budget"
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )  # its own group: the timeout ends it all
        try:
            text, _ = proc.communicate(timeout=left)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            text, _ = proc.communicate()
            rc = 124
        self.say(text.rstrip())
        return rc, text


def _stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


# --- the steps ----------------------------------------------------------------------------------


def step_env(kit: Kit) -> Outcome:
    probe = (
        "import json, platform, torch\n"
        "ok = torch.cuda.is_available()\n"
        "print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__,"
        " 'cuda_available': ok, 'devices': torch.cuda.device_count() if ok else 0,"
        " 'name': torch.cuda.get_device_name(0) if ok else None,"
        " 'memory_bytes': torch.cuda.get_device_properties(0).total_memory if ok else 0,"
        " 'bf16': bool(ok and torch.cuda.is_bf16_supported())}))"
    )
    rc, text = kit.sh([sys.executable, "-c", probe])
    if rc != 0:
        reason = f"the torch probe failed (exit {rc}): {_last_line(text)}"
        kit.no_cuda = f"not run: the env step's probe failed, so CUDA is unknown ({reason})"
        return Outcome("fail", reason)
    numbers = json.loads(text.strip().splitlines()[-1])
    if shutil.which("nvidia-smi"):
        rc, smi = kit.sh(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        )
        numbers["nvidia_smi"] = smi.strip() if rc == 0 else f"exit {rc}"
    # What the orchestrator reads of this host without a CUDA context: the pools' free memory
    # (nvidia-smi, lm.host.gpu_memory) and whether MPS runs.
    rc, read = kit.sh(
        [
            sys.executable,
            "-c",
            "import json; from lm import host; "
            "m = host.gpu_memory('0'); print(json.dumps({'gpu_memory': m and "
            "m._asdict(), 'mps_pipe': host.mps_pipe()}))",
        ]
    )
    if rc == 0:
        numbers.update(json.loads(read.strip().splitlines()[-1]))
    kit.cuda = bool(numbers["cuda_available"])
    return Outcome(
        "pass",
        "CUDA available" if kit.cuda else "no CUDA device: torch.cuda.is_available() is False",
        numbers,
    )


def step_wheels(kit: Kit) -> Outcome:
    wheels = sorted(kit.wheels.glob("*.whl")) if kit.wheels.is_dir() else []
    if not wheels:
        missing = missing_pins(kit)
        where = (
            f"no wheels in {kit.wheels} (run tests/gpu/prepare.sh, then carry .whl): "
            f"the host's own packages are used"
        )
        if missing:
            return Outcome(
                "fail",
                f"{where}, and it lacks {', '.join(missing)}: the steps that run sweeps will fail",
                {"missing": missing},
            )
        return Outcome("skip", f"{where}; it has every pinned one")
    problems = wheelset.check(kit.wheels)
    if problems:
        return Outcome(
            "fail", f"the wheel set is incomplete: {problems[0]}", {"problems": problems}
        )
    rc, text = kit.sh(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(kit.site),
            *map(str, wheels),
        ]
    )
    if rc != 0:
        return Outcome("fail", f"pip install failed (exit {rc}): {_last_line(text)}")
    kit.env["PYTHONPATH"] = os.pathsep.join([str(kit.site), kit.env["PYTHONPATH"]])
    return Outcome(
        "pass",
        f"{len(wheels)} wheels installed in {kit.site}",
        {"wheels": [w.name for w in wheels]},
    )


def missing_pins(kit: Kit) -> list[str]:
    """The packages wheels.txt pins that the kit's interpreter cannot find (by distribution
    name): what this host lacks when no wheels were carried."""
    names = sorted(wheelset.pins())
    probe = (
        "import importlib.metadata as m, json, sys\n"
        "def has(n):\n"
        "    try:\n        m.version(n)\n        return True\n"
        "    except m.PackageNotFoundError:\n        return False\n"
        "print(json.dumps([n for n in sys.argv[1:] if not has(n)]))"
    )
    rc, text = kit.sh([sys.executable, "-c", probe, *names])
    if rc != 0:
        return [f"(cannot tell: the probe failed, exit {rc})"]
    return json.loads(text.strip().splitlines()[-1])


def step_pytest(kit: Kit) -> Outcome:
    xml = kit.out / "pytest.xml"
    rc, text = kit.sh(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "tests/gpu",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
        ]
    )
    numbers = junit_counts(xml)
    if rc == 124:
        return Outcome("fail", "timed out", numbers)
    ran = numbers.get("tests", 0) - numbers.get("skipped", 0)
    if rc != 0 or ran == 0:
        return Outcome("fail", f"pytest exit {rc}: {_last_line(text)}", numbers)
    return Outcome("pass", _last_line(text), numbers)


def junit_counts(xml: Path) -> dict[str, Any]:
    """tests, failures, errors, skipped and the failed tests' names from a JUnit XML file."""
    if not xml.exists():
        return {}
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    counts: dict[str, Any] = {
        k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")
    }
    counts["failed"] = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return counts


def step_memory(kit: Kit) -> Outcome:
    path = kit.out / "memory.json"
    rc, text = kit.sh(
        [
            sys.executable,
            "tests/bench/bench_memory.py",
            "--device",
            "cuda",
            "--configs",
            "gpu",
            "--launcher",
            "fork",
            "--threads",
            "4",
            "--json",
            str(path),
        ]
    )
    if not path.exists():
        return Outcome("fail", f"bench_memory wrote no results (exit {rc}): {_last_line(text)}")
    data = json.loads(path.read_text(encoding="utf-8"))
    points = data["points"]
    outside = [
        p["point"]
        for p in points
        if p["outcome"] != "complete" or abs(p["ratio"] - 1) > MEMORY_TARGET
    ]
    numbers = {
        "points": len(points),
        "worst_ratio": data["worst_ratio"],
        "outside": outside,
        "ratios": {str(p["point"]): round(p["ratio"], 4) for p in points},
    }
    if rc == 124:
        return Outcome("fail", f"timed out after {len(points)} points", numbers)
    if rc != 0 or outside:
        return Outcome(
            "fail",
            f"worst ratio {data['worst_ratio']:.3f}; points outside "
            f"{MEMORY_TARGET:.0%} or not complete: {outside}",
            numbers,
        )
    return Outcome(
        "pass", f"worst ratio {data['worst_ratio']:.3f} over {len(points)} points", numbers
    )


def step_throughput(kit: Kit) -> Outcome:
    path = kit.out / "throughput.json"
    rc, text = kit.sh(
        [
            sys.executable,
            "tests/bench/bench_train.py",
            "--device",
            "cuda",
            "--steps",
            "20",
            "--rounds",
            "2",
            "--json",
            str(path),
        ]
    )
    if rc != 0 or not path.exists():
        return Outcome("fail", f"bench_train exit {rc}: {_last_line(text)}")
    size = json.loads(path.read_text(encoding="utf-8"))["sizes"][0]
    numbers = {
        k: size[k]
        for k in (
            "ratio",
            "utilization",
            "tflops",
            "hand_tokens_per_s",
            "run_tokens_per_s",
            "flops_per_token",
        )
    }
    numbers["compile"] = "not offered by the project"
    reason = (
        f"ratio {size['ratio']:.3f} (target >= {THROUGHPUT_TARGET}), MFU {size['utilization']:.3f}"
    )
    return Outcome("pass" if size["ratio"] >= THROUGHPUT_TARGET else "fail", reason, numbers)


def run_study(kit: Kit, spec: Path, name: str, extra: list[str]) -> tuple[int, str, list[dict]]:
    """``sweeps run`` a spec into the kit's work folder; its ``sweeps trials --json`` rows, each
    with its ``result.json`` under ``result``."""
    db = f"sqlite:///{kit.work / (name + '.db')}"
    runs = kit.work / "runs"
    rc, text = kit.sh(
        [
            sys.executable,
            "-m",
            "sweeps",
            "run",
            str(spec),
            "--storage",
            db,
            "--runs-dir",
            str(runs),
            *extra,
        ]
    )
    if rc != 0:
        return rc, text, []
    rc, rows_text = kit.sh(
        [sys.executable, "-m", "sweeps", "trials", name, "--storage", db, "--json"]
    )
    if rc != 0:
        return rc, rows_text, []
    rows = json.loads(rows_text)
    for row in rows:
        result = runs / name / "trials" / str(row["number"]) / "result.json"
        row["result"] = json.loads(result.read_text(encoding="utf-8")) if result.exists() else None
    return 0, text, rows


def step_study(kit: Kit) -> Outcome:
    rc, text, rows = run_study(kit, KIT_SPEC, "gpu_kit", [])
    if rc != 0:
        return Outcome("fail", f"sweeps run/trials exit {rc}: {_last_line(text)}")
    outcomes: dict[str, int] = {}
    for row in rows:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
    numbers = {
        "trials": [
            {
                k: row[k]
                for k in (
                    "number",
                    "params",
                    "outcome",
                    "reason",
                    "val_bpb",
                    "peak_mem_bytes",
                    "wall_s",
                )
            }
            for row in rows
        ],
        "outcomes": outcomes,
    }
    db = f"sqlite:///{kit.work / 'gpu_kit.db'}"
    ratios = calibration_ratios(kit, db, "gpu_kit")
    numbers["calibration_ratios"] = ratios
    rc, text = kit.sh(
        [
            sys.executable,
            "-m",
            "sweeps",
            "report",
            "gpu_kit",
            "--storage",
            db,
            "--out",
            str(kit.out / "report.html"),
        ]
    )
    if rc != 0:
        return Outcome("fail", f"sweeps report exit {rc}: {_last_line(text)}", numbers)
    if outcomes != {"complete": len(rows)} or not rows:
        return Outcome("fail", f"not every trial completed: {outcomes}", numbers)
    if not isinstance(ratios, list) or len(ratios) != len(rows):
        return Outcome(
            "fail",
            f"calibration pairs {ratios} for {len(rows)} complete trials: "
            "each CUDA peak must be paired with its tensor prediction",
            numbers,
        )
    return Outcome(
        "pass",
        f"{len(rows)} trials complete; calibration ratios (tensors against "
        f"tensors) {', '.join(f'{r:.2f}' for r in ratios)}; report.html "
        f"written",
        numbers,
    )


def calibration_ratios(kit: Kit, db: str, name: str) -> list[float] | str:
    """The study's measured / predicted pairs as calibration reads them
    (``sweeps.preflight.calibration_ratios``): on CUDA max_memory_allocated against the
    predicted tensors, one per complete trial. Why not, when they cannot be read."""
    probe = (
        "import json, sys, optuna\n"
        "from sweeps import preflight\n"
        "optuna.logging.set_verbosity(optuna.logging.WARNING)\n"
        "study = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2])\n"
        "print(json.dumps([round(r, 4) for r in preflight.calibration_ratios(study)]))"
    )
    rc, text = kit.sh([sys.executable, "-c", probe, name, db])
    if rc != 0:
        return f"not read (exit {rc}): {_last_line(text)}"
    return json.loads(text.strip().splitlines()[-1])


def step_packing(kit: Kit) -> Outcome:
    path = kit.work / "packing.json"  # its numbers go to the summary; the file stays behind
    rc, text = kit.sh(
        [
            sys.executable,
            "tests/bench/bench_packing.py",
            "--device",
            "cuda",
            "--trials",
            "16",
            "--tokens",
            "2048",
            "--json",
            str(path),
        ]
    )
    if not path.exists():
        return Outcome("fail", f"bench_packing wrote no results (exit {rc}): {_last_line(text)}")
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = {
        r["label"]: {
            k: round(r[k], 1) for k in ("wall", "per_hour", "workers", "peak_mib", "reserved_mib")
        }
        for r in data["rows"]
    }
    numbers = {
        "trials": data["trials"],
        "tokens": data["tokens"],
        "mps": data["mps"],
        "rows": rows,
        "speedup": data.get("speedup"),
    }
    if rc != 0 or "speedup" not in data:
        return Outcome("fail", f"bench_packing exit {rc}: {_last_line(text)}", numbers)
    one, packed = rows["one at a time"], rows["packed by memory"]
    return Outcome(
        "pass",
        f"{one['per_hour']:.0f} trials/h one at a time, {packed['per_hour']:.0f}"
        f" packed ({data['speedup']:.2f}x, {packed['workers']:.0f} workers, "
        f"MPS {'on' if data['mps'] else 'off'})",
        numbers,
    )


def step_fusion(kit: Kit) -> Outcome:
    path = kit.work / "fusion.json"
    rc, text = kit.sh(
        [
            sys.executable,
            "tests/bench/bench_fusion.py",
            "--device",
            "cuda",
            "--steps",
            "10",
            "--json",
            str(path),
        ]
    )
    if not path.exists():
        return Outcome("fail", f"bench_fusion wrote no results (exit {rc}): {_last_line(text)}")
    points = json.loads(path.read_text(encoding="utf-8"))["points"]
    numbers = {
        "points": [
            {k: (round(v, 2) if isinstance(v, float) else v) for k, v in p.items()} for p in points
        ]
    }
    if rc != 0:
        return Outcome(
            "fail",
            f"bench_fusion exit {rc} after {len(points)} points: {_last_line(text)}",
            numbers,
        )
    best = max(points, key=lambda p: p["speedup"])
    return Outcome(
        "pass",
        f"fused over separate: best {best['speedup']:.2f}x at d_model "
        f"{best['d_model']}, K {best['k']}",
        numbers,
    )


def find_dump(dirs: tuple[Path, ...] = DUMP_DIRS) -> Path | None:
    """The first real ``*.Posts.xml`` dump (``PREFERRED_DUMP`` first) in the first folder that
    holds one: inside the repo (carried to the GPU host), else beside it."""
    for folder in dirs:
        dumps = sorted(folder.glob("*.Posts.xml")) if folder.is_dir() else []
        if dumps:
            return next((d for d in dumps if d.name == PREFERRED_DUMP), dumps[0])
    return None


def classic_spec(dump: Path, corpus_out: Path) -> str:
    """``studies/classic_parenting.toml`` with its corpus read from ``dump`` into
    ``corpus_out``: the rest (batch 1000 x 254, vocab 300, d_ff 1, ...) as shipped."""
    text = CLASSIC_SPEC.read_text(encoding="utf-8")
    for key, value in (("source", dump), ("out", corpus_out)):
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {json.dumps(str(value))}", text)
        if n != 1:
            raise ValueError(f"{CLASSIC_SPEC.name} has {n} '{key} =' lines, not 1")
    return text


def step_classic(kit: Kit) -> Outcome:
    dump = find_dump()
    if dump is None:
        return Outcome(
            "skip",
            "no *.Posts.xml dump in shared/data/stackexchange/ inside the "
            "repo or beside it; copy one in before the device run",
        )
    spec = kit.work / "classic_parenting.toml"
    spec.write_text(classic_spec(dump, kit.work / "corpora" / "classic"), encoding="utf-8")
    # The baseline only (the ablation's first trial; the other two stay enqueued in a database
    # that is thrown away): the question is whether it collapses.
    rc, text, rows = run_study(kit, spec, "classic_parenting", ["--n-trials", "1"])
    ran = [r for r in rows if r["result"] is not None]
    if rc != 0 or not ran:
        return Outcome(
            "fail", f"sweeps run/trials exit {rc}: {_last_line(text)}", {"dump": dump.name}
        )
    row, result = ran[0], ran[0]["result"]
    if {k: row["params"].get(k) for k in ("vocab_size", "d_ff")} != {"vocab_size": 300, "d_ff": 1}:
        return Outcome("fail", f"the trial that ran is not the baseline: {row['params']}")
    final = result.get("final_metrics") or {}
    numbers = {
        "dump": dump.name,
        "params": row["params"],
        "outcome": row["outcome"],
        "reason": row["reason"],
        "steps": result.get("steps"),
        "tokens_seen": result.get("tokens_seen"),
        "unk_rate": result.get("unk_rate"),
        "val_bpb": row["val_bpb"],
        "peak_mem_bytes": row["peak_mem_bytes"],
        **{
            k: final.get(k) for k in ("unigram_gap", "mean_kl_to_mean", "kl_to_unigram", "val_loss")
        },
    }
    collapsed = row["outcome"] == "unigram_collapse"
    return Outcome(
        "pass",
        f"vocab 300, batch 1000 x 254 on {dump.name}: {row['outcome']} "
        f"after {result.get('steps')} steps"
        f"{' (collapsed)' if collapsed else ''}: {row['reason']}",
        numbers,
    )


RUNNERS: dict[str, Callable[[Kit], Outcome]] = {
    "env": step_env,
    "wheels": step_wheels,
    "pytest": step_pytest,
    "memory": step_memory,
    "throughput": step_throughput,
    "study": step_study,
    "packing": step_packing,
    "fusion": step_fusion,
    "classic": step_classic,
}


# --- the driver ---------------------------------------------------------------------------------


def plan() -> list[dict[str, Any]]:
    return [
        {"name": s.name, "budget_s": s.budget_s, "needs_cuda": s.needs_cuda, "what": s.what}
        for s in STEPS
    ]


def write_summary(kit: Kit, started: str, steps: list[dict[str, Any]], wall: float) -> None:
    summary = {
        "kit": "sweeps GPU acceptance kit",
        "started": started,
        "cuda": kit.cuda,
        "total_budget_s": TOTAL_BUDGET_S,
        "plan": plan(),
        "steps": steps,
        "seconds": round(wall, 1),
        "targets": {"memory_within": MEMORY_TARGET, "throughput_ratio": THROUGHPUT_TARGET},
    }
    tmp = kit.out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    tmp.replace(kit.out / "summary.json")


def run_kit(out: Path, wheels: Path, site: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sweeps-gpu-kit-"))
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    kit = Kit(out=out, work=work, wheels=wheels, site=site, env=env)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    steps: list[dict[str, Any]] = []
    with open(out / "log.txt", "w", encoding="utf-8") as kit.log:
        kit.say(f"sweeps GPU acceptance kit, {started}; out {out}; work {work}")
        for step in STEPS:
            kit.say(f"\n=== {step.name} (budget {step.budget_s} s): {step.what}")
            begun = time.monotonic()
            kit.deadline = begun + step.budget_s
            if step.needs_cuda and not kit.cuda:
                outcome = Outcome("skip", kit.no_cuda)
            else:
                try:
                    outcome = RUNNERS[step.name](kit)
                except Exception as exc:  # a broken step is that step's failure, not the kit's
                    outcome = Outcome("fail", f"{type(exc).__name__}: {exc}")
            seconds = round(time.monotonic() - begun, 1)
            steps.append(
                {
                    "name": step.name,
                    "status": outcome.status,
                    "reason": outcome.reason,
                    "seconds": seconds,
                    "budget_s": step.budget_s,
                    "numbers": outcome.numbers,
                }
            )
            kit.say(f"--- {step.name}: {outcome.status} in {seconds} s: {outcome.reason}")
            write_summary(kit, started, steps, time.monotonic() - t0)
        kit.say(
            "\n"
            + "\n".join(
                f"{s['name']:10} {s['status']:4} {s['seconds']:6.1f} s  {s['reason']}"
                for s in steps
            )
        )
    shutil.rmtree(work, ignore_errors=True)
    return 1 if any(s["status"] == "fail" for s in steps) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("plan", help="print the steps and their budgets")
    run = sub.add_parser("run", help="run every step")
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "gpu-out"
    run.add_argument("--out", type=Path, default=default_out, help="$OUT, else gpu-out/")
    run.add_argument("--wheels", type=Path, default=REPO / ".whl")
    run.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "sweeps-kit-site")
    args = ap.parse_args(argv)
    if args.command == "plan":
        for s in STEPS:
            print(f"{s.name:10} {s.budget_s:4d} s  {'cuda' if s.needs_cuda else '    '}  {s.what}")
        print(
            f"{'total':10} {sum(s.budget_s for s in STEPS):4d} s  (limit {TOTAL_BUDGET_S} s, "
            f"{DRIVER_S} s of it for the driver)"
        )
        return 0
    return run_kit(args.out.resolve(), args.wheels.resolve(), args.site.resolve())


if __name__ == "__main__":
    sys.exit(main())
