"""``sweeps init``: a commented starter spec that runs as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.spec import load_spec
from sweeps.starter import STARTER_SPEC
from tests.sweeps.cli import assert_user_error, sweeps


def test_init_writes_a_spec_that_passes_the_dry_run(tmp_path: Path) -> None:
    proc = sweeps("init", "--out", "spec.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "spec.toml").read_text() == STARTER_SPEC
    plan = sweeps("run", "spec.toml", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "warning" not in plan.stderr and "too few steps" not in plan.stdout
    assert "too small a rate" not in plan.stdout  # every trial can be judged
    assert "fits" in plan.stdout and "starter" in plan.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]  # the dry run wrote nothing
    spec = load_spec(tmp_path / "spec.toml")
    assert spec.study.n_trials == 6 and spec.corpus.dir == tmp_path / "data" / "starter"


def test_init_does_not_replace_a_file_without_force(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text("mine\n")
    assert_user_error(sweeps("init", cwd=tmp_path), "spec.toml", "--force")
    assert (tmp_path / "spec.toml").read_text() == "mine\n"
    assert sweeps("init", "--force", cwd=tmp_path).returncode == 0
    assert (tmp_path / "spec.toml").read_text() == STARTER_SPEC


def test_the_schema_accepts_every_shipped_spec_and_refuses_an_unknown_key(tmp_path: Path) -> None:
    import json
    import tomllib

    jsonschema = pytest.importorskip("jsonschema")
    proc = sweeps("schema", "--out", "spec.schema.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads((tmp_path / "spec.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    studies = Path(__file__).resolve().parents[2] / "studies"
    for text in [STARTER_SPEC, *(p.read_text() for p in sorted(studies.rglob("*.toml")))]:
        assert list(validator.iter_errors(tomllib.loads(text))) == []
    bad = tomllib.loads(STARTER_SPEC.replace("d_model = 32", "d_modle = 32"))
    assert any("d_modle" in e.message for e in validator.iter_errors(bad))
    bad = tomllib.loads(STARTER_SPEC.replace('pruner = "median"', 'pruner = "medain"'))
    assert list(validator.iter_errors(bad))
    # the config fields are TrainConfig's, with their defaults
    fixed = schema["properties"]["fixed"]["properties"]
    assert fixed["warmup_tokens"] == {
        "type": "integer",
        "default": 50_000,
        "description": "Linear warm-up length in tokens.",
    }
