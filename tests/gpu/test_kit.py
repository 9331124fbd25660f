"""The GPU acceptance kit, checked on the CPU so it cannot rot between GPU sessions: the plan and
its budgets, a whole run of the driver without CUDA (every GPU step skipped with the reason, a
valid summary), the classic step's dump search and spec, and the wheel-set check on fake wheels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import kit  # noqa: E402
import wheelset  # noqa: E402

try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement


def test_the_plan_fits_the_kits_limit() -> None:
    names = [s.name for s in kit.STEPS]
    assert len(set(names)) == len(names)
    assert set(kit.RUNNERS) == set(names)
    assert all(s.budget_s > 0 for s in kit.STEPS)
    assert sum(s.budget_s for s in kit.STEPS) + kit.DRIVER_S <= kit.TOTAL_BUDGET_S <= 8 * 60
    assert min(s.budget_s for s in kit.STEPS) > kit.GRACE_S * 2


def test_without_cuda_every_gpu_step_is_skipped_and_the_summary_is_valid(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "kit.py"),
            "run",
            "--out",
            str(out),
            "--wheels",
            str(tmp_path / "no-wheels"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["cuda"] is False
    assert [s["name"] for s in summary["steps"]] == [p["name"] for p in summary["plan"]]
    assert sum(p["budget_s"] for p in summary["plan"]) <= summary["total_budget_s"] <= 480
    by_name = {s["name"]: s for s in summary["steps"]}
    for step in kit.STEPS:
        got = by_name[step.name]
        assert got["budget_s"] == step.budget_s
        assert got["seconds"] <= step.budget_s  # deadline, not speed: the kit ends a step by it
        if step.needs_cuda:
            assert (got["status"], got["reason"]) == (
                "skip",
                "no CUDA device: torch.cuda.is_available() is False",
            )
    assert by_name["env"]["status"] == "pass"
    assert by_name["env"]["numbers"]["cuda_available"] is False
    assert "gpu_memory" in by_name["env"]["numbers"] and "mps_pipe" in by_name["env"]["numbers"]
    assert by_name["wheels"]["status"] == "skip" and "prepare.sh" in by_name["wheels"]["reason"]
    assert "it has every pinned one" in by_name["wheels"]["reason"]
    log = (out / "log.txt").read_text(encoding="utf-8")
    assert all(f"=== {s.name} (budget {s.budget_s} s)" in log for s in kit.STEPS)
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "summary.json"]


def a_kit(tmp_path: Path) -> kit.Kit:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return kit.Kit(
        out=tmp_path,
        work=tmp_path,
        wheels=tmp_path / "none",
        site=tmp_path,
        env=env,
        deadline=time.monotonic() + 60,
    )


def test_a_command_that_ignores_sigterm_ends_by_its_steps_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step could overrun its deadline by GRACE_S (and SIGKILL's wait): the kit's worst
    case was more than the sum of its budgets."""
    monkeypatch.setattr(kit, "GRACE_S", 1.0)
    k = a_kit(tmp_path)
    k.deadline = time.monotonic() + 4
    rc, _ = k.sh(["sh", "-c", "trap '' TERM; sleep 30"])
    assert rc == 124
    # The kit stops 2 x GRACE_S early (SIGTERM, then SIGKILL after GRACE_S): a second for the
    # SIGKILL's reap, however busy the machine.
    assert time.monotonic() <= k.deadline  # deadline, not speed: the kit's own promise
    k.deadline = time.monotonic() + 0.5  # less than the stop takes: not started at all
    assert k.sh(["true"]) == (124, "no time left in the step's budget")


def test_without_wheels_the_packages_the_host_lacks_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said the host's packages are used, though the host lacks optuna, sqlalchemy, ..."""
    monkeypatch.setattr(
        kit.wheelset, "pins", lambda: {"optuna": "5.0.0", "no-such-dist-xyz": "1.0"}
    )
    got = kit.step_wheels(a_kit(tmp_path))
    assert got.status == "fail" and got.numbers == {"missing": ["no-such-dist-xyz"]}
    assert "lacks no-such-dist-xyz" in got.reason and "prepare.sh" in got.reason


def test_a_failed_env_probe_is_the_reason_the_cuda_steps_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe that failed said nothing about CUDA, yet every later step said 'no CUDA device'."""
    k = a_kit(tmp_path)
    monkeypatch.setattr(
        kit.Kit,
        "sh",
        lambda self, argv: (1, "ImportError: libcudart.so.12: cannot open shared object file"),
    )
    assert kit.step_env(k).status == "fail"
    assert k.no_cuda.startswith("not run: the env step's probe failed, so CUDA is unknown")
    assert "libcudart" in k.no_cuda and not k.cuda


def test_the_packing_and_fusion_steps_read_their_benchmarks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = a_kit(tmp_path)
    packing = {
        "device": "cuda",
        "trials": 16,
        "tokens": 4096,
        "mps": False,
        "speedup": 3.0,
        "rows": [
            {
                "label": label,
                "wall": wall,
                "per_hour": 16 / wall * 3600,
                "workers": w,
                "peak_mib": 80.0,
                "reserved_mib": 700.0,
            }
            for label, wall, w in (("one at a time", 60.0, 1), ("packed by memory", 20.0, 16))
        ],
    }
    fusion = {
        "points": [
            {
                "d_model": 32,
                "k": 16,
                "steps": 10,
                "fused_steps_per_s": 50.0,
                "separate_steps_per_s": 5.0,
                "speedup": 10.0,
            }
        ]
    }

    def bench(self: kit.Kit, argv: list[str]) -> tuple[int, str]:
        data = packing if "bench_packing.py" in argv[1] else fusion
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(data))
        return 0, "done"

    monkeypatch.setattr(kit.Kit, "sh", bench)
    got = kit.step_packing(k)
    assert got.status == "pass" and got.numbers["speedup"] == 3.0
    assert got.reason == "960 trials/h one at a time, 2880 packed (3.00x, 16 workers, MPS off)"
    got = kit.step_fusion(k)
    assert got.status == "pass" and "best 10.00x at d_model 32, K 16" in got.reason


def test_the_study_steps_calibration_pairs_are_read_as_calibration_reads_them(
    tmp_path: Path,
) -> None:
    import optuna

    db = f"sqlite:///{tmp_path / 'k.db'}"
    study = optuna.create_study(study_name="k", storage=db)
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            values=[1.0],
            user_attrs={
                "outcome": "complete",
                "peak_mem_bytes": 95,
                "peak_mem_kind": "cuda_max_allocated",
                "predicted_peak_mem_raw_bytes": 100,
                "predicted_peak_mem_kind": "cuda_max_allocated",
                "predicted_mem_raw_bytes": 700,
            },
        )
    )
    assert kit.calibration_ratios(a_kit(tmp_path), db, "k") == [0.95]
    assert kit.calibration_ratios(a_kit(tmp_path), db, "missing").startswith("not read")


def test_the_dump_is_looked_for_in_the_repo_first_history_preferred(tmp_path: Path) -> None:
    inside, beside = tmp_path / "inside", tmp_path / "beside"
    assert kit.find_dump((inside, beside)) is None
    beside.mkdir()
    (beside / "a.Posts.xml").write_text("<posts/>")
    assert kit.find_dump((inside, beside)) == beside / "a.Posts.xml"
    inside.mkdir()
    (inside / "a.Posts.xml").write_text("<posts/>")
    (inside / "history.Posts.xml").write_text("<posts/>")
    assert kit.find_dump((inside, beside)) == inside / "history.Posts.xml"


def test_the_classic_spec_reads_the_dump_and_keeps_the_seed_configuration(tmp_path: Path) -> None:
    dump, out = tmp_path / "x.Posts.xml", tmp_path / "corpora" / "classic"
    spec = tomllib.loads(kit.classic_spec(dump, out))
    shipped = tomllib.loads(kit.CLASSIC_SPEC.read_text(encoding="utf-8"))
    assert spec["corpus"] == {**shipped["corpus"], "source": str(dump), "out": str(out)}
    assert spec["fixed"] == shipped["fixed"] and spec["ablation"] == shipped["ablation"]
    assert (spec["fixed"]["batch_size"], spec["fixed"]["seq_len"]) == (1000, 254)
    assert spec["ablation"]["baseline"] == {"vocab_size": 300, "d_ff": 1}


def test_junit_counts(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="t" name="a"/><testcase classname="t" name="b">'
        '<failure message="x"/></testcase><testcase classname="t" name="c">'
        "<skipped/></testcase></testsuite></testsuites>"
    )
    assert kit.junit_counts(xml) == {
        "tests": 3,
        "failures": 1,
        "errors": 0,
        "skipped": 1,
        "failed": ["t::b"],
    }
    assert kit.junit_counts(tmp_path / "none.xml") == {}


# --- the wheel set ------------------------------------------------------------------------------


def fake_wheel(
    folder: Path,
    name: str,
    version: str,
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    pad: int = 0,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tag}.whl"
    meta = (
        "\n".join(
            [
                "Metadata-Version: 2.1",
                f"Name: {name}",
                f"Version: {version}",
                *[f"Requires-Dist: {r}" for r in requires],
            ]
        )
        + "\n"
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        if pad:
            zf.writestr(f"{name}/pad.bin", os.urandom(pad))
    return path


HOST = {"numpy", "typing-extensions", "markupsafe"}


def whole_set(folder: Path) -> dict[str, str]:
    fake_wheel(
        folder,
        "optuna",
        "5.0.0",
        (
            "alembic>=1.5",
            "numpy",
            "colorlog",
            "tomli; python_version < '3.11'",
            "colorama; sys_platform == 'win32'",
            'pytest; extra == "dev"',
        ),
    )
    fake_wheel(folder, "alembic", "1.20.1", ("SQLAlchemy>=2.0", "Mako", "typing_extensions"))
    fake_wheel(
        folder,
        "SQLAlchemy",
        "2.1.9",
        ("typing-extensions>=4.6",),
        tag="cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64",
    )
    fake_wheel(folder, "Mako", "1.4.3", ("MarkupSafe>=2.0",))
    fake_wheel(folder, "colorlog", "6.12.0")
    return {"optuna": "5.0.0", "alembic": "1.20.1", "sqlalchemy": "2.1.9"}


def test_a_whole_set_passes(tmp_path: Path) -> None:
    pins = whole_set(tmp_path)
    assert wheelset.check(tmp_path, pins, HOST) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: (d / "colorlog-6.12.0-py3-none-any.whl").unlink(),
            "optuna needs colorlog, neither in the set nor on the host",
        ),
        (lambda d: fake_wheel(d, "colorlog", "6.11.0"), "colorlog is there in 2 versions"),
        (
            lambda d: (d / "optuna-5.0.0-py3-none-any.whl").unlink(),
            "optuna==5.0.0 is pinned in wheels.txt but has no wheel",
        ),
        (
            lambda d: (
                (d / "alembic-1.20.1-py3-none-any.whl").unlink(),
                fake_wheel(d, "alembic", "1.4.0", ("SQLAlchemy", "Mako")),
            ),
            "alembic is 1.4.0, wheels.txt pins 1.20.1",
        ),
        (
            lambda d: fake_wheel(d, "rustbpe", "0.1.0", tag="cp311-cp311-manylinux_2_17_x86_64"),
            "does not install on CPython 3.12, Linux x86-64",
        ),
        (
            lambda d: fake_wheel(d, "rustbpe", "0.1.0", tag="cp312-cp312-manylinux_2_17_aarch64"),
            "does not install on CPython 3.12, Linux x86-64",
        ),
        (
            lambda d: fake_wheel(d, "rustbpe", "0.1.0", tag="cp312-cp312-win_amd64"),
            "does not install on CPython 3.12, Linux x86-64",
        ),
        (
            lambda d: fake_wheel(d, "plotly", "7.1.0", ("narwhals>=1.15.1",)),
            "plotly needs narwhals, neither in the set nor on the host",
        ),
        (
            lambda d: fake_wheel(d, "plotly", "7.1.0", ("colorlog>=7",)),
            "plotly needs 'colorlog>=7', the set has colorlog 6.12.0",
        ),
        (lambda d: fake_wheel(d, "big", "1.0", pad=3000), "the wheels weigh"),
        (
            lambda d: (d / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip"),
            "broken-1.0-py3-none-any.whl is not a readable wheel",
        ),
    ],
)
def test_each_flaw_of_a_set_is_named(tmp_path: Path, change, expected: str) -> None:
    pins = whole_set(tmp_path)
    change(tmp_path)
    problems = wheelset.check(tmp_path, pins, HOST, max_bytes=2000)
    assert any(expected in p for p in problems), problems


def test_abi3_and_manylinux_tags_install_on_the_host() -> None:
    assert wheelset._tag_fits("x-1-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert wheelset._tag_fits("x-1-py2.py3-none-any.whl")
    assert not wheelset._tag_fits("x-1-cp313-abi3-manylinux_2_17_x86_64.whl")
    assert not wheelset._tag_fits("x-1-cp312-cp312-macosx_11_0_arm64.whl")


def test_an_empty_folder_says_how_to_fill_it(tmp_path: Path) -> None:
    assert "prepare.sh" in wheelset.check(tmp_path / "none", {}, set())[0]


def test_the_projects_dependencies_are_on_the_host_or_pinned() -> None:
    """A dependency added to pyproject.toml that the GPU host lacks must be pinned in
    wheels.txt, or the kit's study step fails there for want of it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    needed = {wheelset.normalize(Requirement(r).name) for r in project["dependencies"]}
    pins, host = wheelset.pins(), wheelset.host_packages()
    assert needed - host - set(pins) == set()
    assert set(pins) & host == set()  # the host's own version is the one the kit uses
