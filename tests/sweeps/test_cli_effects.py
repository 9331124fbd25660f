"""``sweeps effects`` on a stored ``[ablation]`` study, as a user runs it; its one-line errors."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeps import results
from sweeps import storage as st
from sweeps.spec import StudySpec
from tests.sweeps.cli import assert_user_error, sweeps

STUDIES = Path(__file__).resolve().parents[2] / "studies"
#: studies/README.md's ffn_width table: val_bpb by d_ff, seeds 0 / 1 / 2.
FFN_WIDTH = {256: [2.193, 2.203, 2.248], 192: [2.252, 2.221, 2.229],
             128: [2.222, 2.225, 2.190], 64: [2.214, 2.219, 2.190], 1: [2.235, 2.210, 2.198]}


def store_ablation(url: str, name: str, points: dict[int, list[float]]) -> None:
    """An ablation study as ``sweeps run`` leaves it: the spec stored, one trial per point and
    seed with its parameters and recorded metrics."""
    spec = tomllib.loads((STUDIES / "ffn_width.toml").read_text())
    spec["study"]["name"] = name
    stored = StudySpec.from_dict(spec, source=STUDIES / "ffn_width.toml",
                                 check_paths=False).to_dict()
    study = optuna.create_study(study_name=name, storage=st.open_storage(url))
    study.set_user_attr("spec", stored)
    dists = {"d_ff": CategoricalDistribution(list(points)), "seed": CategoricalDistribution([0, 1,
                                                                                            2])}
    for d_ff, values in points.items():
        for seed, v in enumerate(values):
            study.add_trial(create_trial(
                state=TrialState.COMPLETE, value=v, params={"d_ff": d_ff, "seed": seed},
                distributions=dists, user_attrs={"outcome": "complete", "val_bpb": v,
                                                 "config": {"d_ff": d_ff, "seed": seed}}))


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('effects') / 'e.db'}"
    store_ablation(url, "ffn_width", FFN_WIDTH)
    return url


def test_results_layer_groups_the_replicates(url: str) -> None:
    reps = results.replicates_frame(url, "ffn_width").set_index("config")
    assert reps.loc["d_ff=256", "n"] == 3 and reps.loc["d_ff=256", "seeds"] == [0, 1, 2]
    assert reps.loc["d_ff=1", "mean"] == pytest.approx(2.2143, abs=1e-4)


def test_effects_reproduce_the_hand_made_table(url: str) -> None:
    proc = sweeps("effects", "ffn_width", "--storage", url, "--markdown")
    assert proc.returncode == 0, proc.stderr
    # The README's "mean +- sd" column, to the digits it shows.
    for level, shown in (("d_ff=256", "2.215 ± 0.029"), ("192", "2.234 ± 0.016"),
                         ("128", "2.212 ± 0.019"), ("64", "2.208 ± 0.016"),
                         ("| 1 ", "2.214 ± 0.019")):
        line = next(x for x in proc.stdout.splitlines() if level in x)
        assert shown in line, line
    assert proc.stdout.count("cannot tell apart with n = 3") == 4


def test_effects_json_and_table(url: str) -> None:
    proc = sweeps("effects", "ffn_width", "--storage", url, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["baseline"] == {"d_ff": 256} and len(data["rows"]) == 5
    table = sweeps("effects", "ffn_width", "--storage", url, "--baseline", "d_ff=1")
    assert table.returncode == 0 and "d_ff=1" in table.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("nope",), "study 'nope' is not in storage"),
    (("ffn_width", "--baseline", "d_ff=999"), "matches no complete configuration"),
    (("ffn_width", "--baseline", "lr"), "--baseline 'lr': write FIELD=VALUE"),
    (("ffn_width", "--level", "2"), "--level must be between 0 and 1"),
    (("ffn_width", "--markdown", "--json"), "exclusive"),
])
def test_bad_input_is_one_line(url: str, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(sweeps("effects", *args, "--storage", url), needle)


def test_a_study_without_ablation_needs_a_baseline(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    optuna.create_study(study_name="plain", storage=st.open_storage(url))
    assert_user_error(sweeps("effects", "plain", "--storage", url), "not an [ablation] study",
                      "--baseline")
