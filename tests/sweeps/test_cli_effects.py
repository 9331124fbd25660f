"""``sweeps effects`` on a stored ``[ablation]`` study, as a user runs it; its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from sweeps import replicates as rp
from sweeps import storage as st
from tests.sweeps.ablation import FFN_WIDTH, store_ablation
from tests.sweeps.cli import assert_user_error, sweeps


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('effects') / 'e.db'}"
    store_ablation(url, "ffn_width", FFN_WIDTH)
    return url


def test_results_layer_groups_the_replicates(url: str) -> None:
    reps = rp.replicates_frame(url, "ffn_width").set_index("config")
    assert reps.loc["d_ff=256", "n"] == 3 and reps.loc["d_ff=256", "seeds"] == [0, 1, 2]
    assert reps.loc["d_ff=1", "mean"] == pytest.approx(2.2143, abs=1e-4)


def test_effects_reproduce_the_hand_made_table(url: str) -> None:
    proc = sweeps("effects", "ffn_width", "--storage", url, "--markdown")
    assert proc.returncode == 0, proc.stderr
    # The README's "mean +- sd" column, to the digits it shows.
    for level, shown in (
        ("d_ff=256", "2.215 ± 0.029"),
        ("192", "2.234 ± 0.016"),
        ("128", "2.212 ± 0.019"),
        ("64", "2.208 ± 0.016"),
        ("| 1 ", "2.214 ± 0.019"),
    ):
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


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("nope",), "study 'nope' is not in storage"),
        (("ffn_width", "--baseline", "d_ff=999"), "matches no configuration"),
        (("ffn_width", "--baseline", "lr"), "--baseline 'lr': write FIELD=VALUE"),
        (("ffn_width", "--level", "2"), "--level must be between 0 and 1"),
        (("ffn_width", "--markdown", "--json"), "exclusive"),
        (("ffn_width", "--metric", "nope"), "metric 'nope' is not a metric"),
        (("ffn_width", "--metric", "number"), "metric 'number' is not a metric"),
    ],
)
def test_bad_input_is_one_line(url: str, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(sweeps("effects", *args, "--storage", url), needle)


def test_a_study_without_ablation_needs_a_baseline(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    optuna.create_study(study_name="plain", storage=st.open_storage(url))
    assert_user_error(
        sweeps("effects", "plain", "--storage", url), "not an [ablation] study", "--baseline"
    )


@pytest.mark.study
def test_effects_of_a_real_ablation_run(tmp_path: Path, corpus: Path) -> None:
    """``sweeps run`` of a tiny [ablation] (2 points x 2 seeds), then ``sweeps effects``: the
    baseline is read from the stored spec, every point paired by seed."""
    from tests.sweeps.helpers import TINY, sweeps_run, toml_text

    spec = {
        "study": {"name": "abl", "pruner": "none"},
        "corpus": {"dir": str(corpus)},
        "fixed": {
            **{k: v for k, v in TINY.items() if k != "d_ff"},
            "tokenizer": "word",
            "vocab_size": 300,
        },
        "ablation": {"baseline": {"d_ff": 32}, "vary": {"d_ff": [8]}, "seeds": [0, 1]},
        "limits": {"memory_budget": "4GiB", "max_wall_s": 120},
    }
    (tmp_path / "abl.toml").write_text(toml_text(spec))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    ran = sweeps_run("run", "abl.toml", "--storage", url, "--workers", "1", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    proc = sweeps("effects", "abl", "--storage", url, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["baseline"] == {"d_ff": 32} and data["metric"] == "val_bpb"
    base, level = data["rows"]
    assert base["factor"] == "baseline" and base["n"] == 2 and base["seeds"] == [0, 1]
    assert (level["factor"], level["level"], level["n"]) == ("d_ff", "8", 2)
    assert level["comparison"]["n_pairs"] == 2 and level["comparison"]["test"] == "paired t"
