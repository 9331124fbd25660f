"""Colour by what varied (issue 38, item 2): which field colours the learning curves, the
vocabulary chart and the Pareto points, the groups it makes, the outcome as the marker, each
curve's unigram baseline beside it; and ``sweeps report --color-by``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sweeps import report, results
from sweeps.charts import TOKENIZER_COLORS, colors, curves, importance, pareto, vocab
from tests.sweeps import fake_study
from tests.sweeps.ablation import FFN_WIDTH, store_ablation
from tests.sweeps.cli import assert_user_error, sweeps_here


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('colors') / 'search.db'}"
    fake_study.fabricate(url, "search", 30, seed=11)
    return url


def loaded(url: str, name: str, color_by: str | None = None) -> results.StudyResults:
    data = results.load(url, name)
    data.color_by = colors.choose(data, color_by)
    return data


def test_an_ablation_is_coloured_by_its_factor_not_its_seed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ffn.db'}"
    store_ablation(url, "ffn", FFN_WIDTH)
    data = results.load(url, "ffn")
    assert colors.default_field(data) == "d_ff"
    assert set(colors.varied(data)) == {"d_ff", "seed"}
    groups, palette = colors.groups(data.trials, "d_ff")
    assert list(palette) == [f"d_ff={v}" for v in sorted(FFN_WIDTH)]  # numeric order
    assert len(set(palette.values())) == len(FFN_WIDTH)  # one colour per level
    by_number = dict(zip(groups["number"], groups["group"], strict=True))
    for number, d_ff in zip(data.trials["number"], data.trials["param_d_ff"], strict=True):
        assert by_number[number] == f"d_ff={d_ff}"


def test_a_search_is_coloured_by_its_most_important_parameter(search: str) -> None:
    data = results.load(search, "search")
    ranked, _ = importance.data(data.trials, data.distributions)
    assert ranked
    top = next(n for n in ranked if n in colors.varied(data))
    assert colors.default_field(data) == top


def test_without_importances_the_first_varied_parameter_colours(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'few.db'}"
    fake_study.fabricate(url, "few", 4, seed=1, outcomes=("pruned",) * 4)
    data = results.load(url, "few")
    assert importance.data(data.trials, data.distributions)[0] is None  # no complete trial
    assert colors.default_field(data) == colors.varied(data)[0] == "tokenizer"


def test_a_field_of_many_numbers_is_cut_into_ordered_bins(search: str) -> None:
    data = results.load(search, "search")
    groups, palette = colors.groups(data.trials, "lr")
    assert 2 <= len(palette) <= colors.BINS
    lr = dict(zip(data.trials["number"], data.trials["param_lr"], strict=True))
    for number, group in zip(groups["number"], groups["group"], strict=True):
        low, high = (float(x) for x in group.removeprefix("lr ").split(" to "))
        assert low * 0.995 <= lr[number] <= high * 1.005, (group, lr[number])  # 3 digits


def test_a_trial_that_does_not_set_the_field_has_the_value_it_trained_with(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cond.db'}"
    fake_study.fabricate(url, "cond", 20, seed=2, when={"d_ff": "attention == 'naive'"})
    data = results.load(url, "cond")
    groups, _ = colors.groups(data.trials, "d_ff")
    unset = data.trials["param_d_ff"].isna()
    assert unset.any()
    trained = dict(zip(data.trials["number"], data.trials["d_ff"], strict=True))
    for number, group in zip(groups["number"], groups["group"], strict=True):
        assert group == f"d_ff={trained[number]}"  # the config's default where not searched
    # Known neither as a parameter nor as trained: "(not set)", in grey.
    groups, palette = colors.groups(data.trials.drop(columns="d_ff"), "d_ff")
    assert set(groups.loc[groups["group"] == colors.NOT_SET, "number"]) == set(
        data.trials.loc[unset, "number"]
    )
    assert palette[colors.NOT_SET] == colors.NOT_SET_COLOR


def test_curves_are_coloured_by_the_field_with_their_unigram_baseline(search: str) -> None:
    data = loaded(search, "search", "tokenizer")
    lines, _, _ = curves.data(data.evals, data.trials)
    styles = curves.styles(lines, data)
    trials = data.trials.set_index("number")
    assert len(styles) == lines["trial_number"].nunique() > 5
    for _, row in styles.iterrows():
        trial = trials.loc[row["trial_number"]]
        assert row["color"] == TOKENIZER_COLORS[trial["tokenizer"]]
        assert row["dash"] == ("solid" if trial["outcome"] == "complete" else "dot")
        assert row["symbol"] == colors.symbol(trial["outcome"])
        if np.isfinite(trial["unigram_bpb"]):
            assert row["unigram_bpb"] == pytest.approx(trial["unigram_bpb"])
    assert styles["unigram_bpb"].notna().all()
    figure = curves.chart(data).figure
    baselines = [t for t in figure.data if "unigram baseline" in (t.name or "")]
    drawn = {t.line.color for t in figure.data if t.mode == "lines+markers"}
    assert baselines and {t.line.dash for t in baselines} == {"dash"}
    assert {t.line.color for t in baselines} == drawn  # beside each colour, its baselines
    segments = sum(sum(y is None for y in t.y) for t in baselines)
    assert segments == len(styles)  # one dashed segment per curve


def test_pareto_points_are_coloured_by_the_field_and_marked_by_outcome(search: str) -> None:
    data = loaded(search, "search", "attention")
    frame = pareto.styled(data, "peak_mem_bytes")
    trials = data.trials.set_index("number")
    assert set(frame["group"]) == {"attention=naive", "attention=sdpa"}
    for _, row in frame.iterrows():
        assert row["group"] == f"attention={trials.loc[row['number'], 'param_attention']}"
        assert row["symbol"] == colors.symbol(row["outcome"])
    assert colors.symbol("complete") == "circle" and len(set(frame["symbol"])) > 1
    figure = pareto.chart(data).figure
    named = {t.name for t in figure.data}
    assert {"attention=naive", "attention=sdpa", "complete"} <= named


def test_vocabulary_points_are_coloured_by_the_field(search: str) -> None:
    data = loaded(search, "search", "d_ff")
    points, _, _ = vocab.data(data.trials)
    styled = vocab.point_styles(data, points)
    d_ff = dict(zip(data.trials["number"], data.trials["param_d_ff"], strict=True))
    assert len(styled) == len(points)
    assert all(
        g == f"d_ff={d_ff[n]}" for n, g in zip(styled["number"], styled["group"], strict=True)
    )
    assert vocab.line_color(data, "bpe") == vocab.LINE_COLOR  # the lines leave colour alone
    by_tokenizer = loaded(search, "search", "tokenizer")
    assert vocab.line_color(by_tokenizer, "bpe") == TOKENIZER_COLORS["bpe"]


def test_report_colours_by_the_chosen_field(search: str) -> None:
    _, charts, data = report.build(search, "search", color_by="attention")
    assert data.color_by == "attention"
    drawn = {c.key: c for c in charts}
    assert "Colour: attention." in drawn["curves"].about
    names = {t.name for t in drawn["curves"].figure.data}
    assert {"attention=naive", "attention=sdpa"} <= names


def test_color_by_a_field_the_study_lacks_is_one_line_naming_the_fields(
    search: str, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    proc = sweeps_here(
        "report", "search", "--storage", search, "--out", str(out), "--color-by", "colour"
    )
    assert_user_error(proc, "--color-by 'colour'", "tokenizer", "vocab_size", "d_ff", "lr")
    assert not out.exists()
    assert_user_error(
        sweeps_here("report", "search", "search", "--storage", search, "--color-by", "d_ff"),
        "coloured by study",
    )


def test_color_by_on_the_command_line(search: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    proc = sweeps_here(
        "report", "search", "--storage", search, "--out", str(out), "--color-by", "seq_len"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Colour: seq_len." in out.read_text(encoding="utf-8")
