"""The study specs shipped in ``studies/``: each passes ``sweeps run --dry-run`` through the real
CLI (validated, its plan, trial count and the predicted memory of its largest point printed,
nothing written), its corpus source points somewhere sensible, and the quickstart's seeded draw
still gives the outcome mix the README promises (predicted from the spec, nothing trained).

A spec's corpus source may be missing on this machine (a full dump the user downloads, or the
shared dumps beside the checkout): the dry run is then made on a copy of the spec in a temporary
directory, with an empty stand-in file at the same relative path, because the dry run checks that
the source exists. That the real paths are right is checked on its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from sweeps.spec import StudySpec, load_spec

REPO = Path(__file__).resolve().parents[2]
STUDIES = REPO / "studies"
SHARED = REPO.parent / "shared" / "data" / "stackexchange"
SPECS = sorted(STUDIES.glob("*.toml"))
SIZE = r"[\d.]+ (?:B|KiB|MiB|GiB|TiB)"


def test_the_example_studies_ship_with_the_project() -> None:
    names = {p.stem for p in SPECS}
    assert {
        "quickstart",
        "vocab_tradeoff",
        "ffn_width",
        "attention_memory",
        "batch_accum",
        "classic_parenting",
        "smoke",
    } <= names


def test_every_study_says_what_question_it_answers() -> None:
    for path in SPECS:
        head = path.read_text(encoding="utf-8").split("[study]")[0]
        comment = [line for line in head.splitlines() if line.startswith("#")]
        assert len(comment) >= 2, f"{path.name}: no comment block before [study]"


def _sources(path: Path) -> list[str]:
    corpus = tomllib.loads(path.read_text(encoding="utf-8"))["corpus"]
    source = corpus.get("source", [])
    return [source] if isinstance(source, str) else list(source)


def _copy_with_stand_ins(path: Path, tmp: Path) -> Path:
    """The spec copied deep enough under ``tmp`` that its relative sources land inside ``tmp``,
    with an empty Posts.xml at each source path (the dry run only checks that it exists)."""
    sources = _sources(path)
    depth = max((len(Path(s).parts) for s in sources), default=1)
    studies = tmp.joinpath(*(["r"] * depth), "studies")
    studies.mkdir(parents=True)
    copy = studies / path.name
    shutil.copy(path, copy)
    for s in sources:
        assert not Path(s).is_absolute(), (
            f"{path.name}: source {s} is absolute; make it "
            "relative to the spec so the project can move"
        )
        stand_in = (studies / s).resolve()
        assert stand_in.is_relative_to(tmp)
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text(
            '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n</posts>\n', encoding="utf-8"
        )
    return copy


def dry_run(spec_path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "SWEEPS_STORAGE": "sqlite:///sweeps.db"}
    return subprocess.run(
        [sys.executable, "-m", "sweeps", "run", str(spec_path), "--dry-run"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_every_study_passes_the_dry_run(path: Path, tmp_path: Path) -> None:
    missing = [s for s in _sources(path) if not (path.parent / s).exists()]
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    target = _copy_with_stand_ins(path, tmp_path / "copy") if missing else path
    proc = dry_run(target, run_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    spec = load_spec(path, check_paths=False)
    # The plan: the trial count, and the predicted memory of the largest point.
    trials = re.search(r"^\s*trials\s+([\d,]+)\s*$", out, re.MULTILINE)
    assert trials is not None, out
    assert int(trials.group(1).replace(",", "")) == spec.study.n_trials
    assert re.search(rf"predicted peak\s+{SIZE}", out), out
    assert re.search(r"against the budget\s+(fits|fitted|predicted_oom)", out), out
    # A dry run writes nothing: no database, no runs, no prepared corpus.
    assert list(run_dir.iterdir()) == []
    if spec.corpus.needs_prepare and missing:
        assert not (target.parent / "../data/corpora").resolve().exists()


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_corpus_sources_point_at_the_shared_dumps_or_the_users_data_folder(path: Path) -> None:
    for s in _sources(path):
        resolved = (path.parent / s).resolve()
        if resolved.is_relative_to(REPO / "data"):
            continue  # a dump the user downloads into the git-ignored data/ folder
        assert resolved.parent == SHARED.resolve(), f"{path.name}: unexpected source {s}"
        if not SHARED.is_dir():
            pytest.skip(f"real Stack Exchange dumps not found at {SHARED}")
        assert resolved.is_file(), f"{path.name}: {resolved} does not exist"


# --- the quickstart's promise, predicted without training ----------------------------------------


def _quickstart_draw(spec: StudySpec) -> list[tuple[dict[str, Any], Any, Any]]:
    """The configurations `sweeps run` will sample for a fresh quickstart study (the seeded
    random sampler draws independently of results) and their memory plans."""
    import optuna

    from sweeps import admission, preflight, space

    budget = admission.device_budget(spec.limits.budget, "cpu")
    study = optuna.create_study(sampler=space.make_sampler(spec))
    out = []
    for _ in range(spec.study.n_trials):
        trial = study.ask()
        params = space.suggest(trial, spec)
        cfg = space.trial_config(spec, params)
        plan = preflight.plan_trial(cfg, spec.limits, device="cpu", budget_bytes=budget)
        out.append((params, cfg, plan))
        study.tell(trial, 0.0)
    return out


def test_quickstart_draws_each_outcome_from_its_own_configurations() -> None:
    spec = load_spec(STUDIES / "quickstart.toml", check_paths=False)
    assert spec.study.sampler.name == "random" and spec.study.seed is not None
    # The default collapse thresholds, never lowered for the demo.
    assert "collapse" not in spec.raw.get("limits", {})
    assert 6 <= spec.study.n_trials <= 10
    assert {"vocab_size", "d_ff", "seq_len", "batch_size", "grad_accum", "lr"} <= set(
        spec.param_names
    )
    draw = _quickstart_draw(spec)
    budget = spec.limits.memory_budget
    assert isinstance(budget, int)
    oom = [plan for _, _, plan in draw if not plan.fits]
    ran = [(cfg, plan) for _, cfg, plan in draw if plan.fits]
    collapse = [cfg for cfg, _ in ran if cfg.lr >= 0.3]
    healthy = [cfg for cfg, _ in ran if cfg.lr < 0.3]
    assert oom and collapse and len(healthy) >= 2, draw
    # Far from the budget on either side, so the study's calibration factor (clamped to
    # [0.5, 2]) cannot move a trial across it.
    assert all(plan.predicted_raw_bytes > 2 * budget for plan in oom)
    assert all(plan.predicted_raw_bytes < budget / 2 for _, plan in ran)
    # Every launched trial gets enough optimizer steps to be judged (min_steps), so the collapse
    # rule judges the healthy ones too, after they have left the unigram plateau.
    assert spec.limits.collapse.min_steps <= 200
    assert spec.fixed["max_tokens"] == 3 * spec.fixed["eval_every_tokens"]
    for cfg in healthy:
        assert cfg.max_tokens // cfg.tokens_per_step >= 200, cfg


def test_batch_accum_keeps_the_effective_batch_fixed() -> None:
    spec = load_spec(STUDIES / "batch_accum.toml", check_paths=False)
    points = spec.initial_trials()
    assert len(points) == spec.study.n_trials == 16
    assert {p["batch_size"] * p["grad_accum"] for p in points} == {16}
    assert {(p["precision"], p["checkpointing"]) for p in points} == {
        ("fp32", False),
        ("fp32", True),
        ("bf16", False),
        ("bf16", True),
    }


def test_ffn_width_spans_one_to_four_times_d_model_with_three_seeds() -> None:
    spec = load_spec(STUDIES / "ffn_width.toml", check_paths=False)
    d_model = spec.fixed["d_model"]
    assert spec.ablation is not None and spec.ablation.seeds == (0, 1, 2)
    widths = set(spec.ablation.choices("d_ff"))
    assert {d_model, 2 * d_model, 3 * d_model, 4 * d_model, 1} <= widths
