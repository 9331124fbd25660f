"""Fair arms: vocabularies compared on the same text, ablations that never drop a failure, and no
configuration trained twice (issue 33). Spec rules and the effects table on synthetic trials
first, then real studies on the shared tiny corpus."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from lm import budget
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import effects as fx
from sweeps import replicates as rp
from sweeps import space
from sweeps.spec import halving, read_spec
from tests.sweeps.ablation import table
from tests.sweeps.helpers import TINY, spec_dict, study_trials, sweeps_run, toml_text


def ablation_spec(corpus: Path, name: str = "abl", **extra: object) -> dict:
    fixed = {**TINY, "tokenizer": "bpe", "max_tokens": 4_000}
    fixed.update(extra.pop("fixed", {}))  # type: ignore[arg-type]
    design = extra.get("ablation", {})
    for key in [*design.get("baseline", {}), *design.get("vary", {})]:  # type: ignore[attr-defined]
        fixed.pop(key, None)
    return {
        "study": {"name": name, **extra.pop("study", {})},  # type: ignore[dict-item]
        "corpus": {"dir": str(corpus)},
        "fixed": fixed,
        "ablation": {
            "baseline": {"vocab_size": 1024},
            "vary": {"vocab_size": [260]},
            "seeds": [0, 1],
            **extra.pop("ablation", {}),
        },  # type: ignore[dict-item]
        "limits": {"memory_budget": "4GiB", "max_wall_s": 120, **extra.pop("limits", {})},
    }  # type: ignore[dict-item]


# --- the spec ------------------------------------------------------------------------------------


def test_an_ablation_of_the_vocabulary_compares_equal_text_and_is_not_pruned(corpus: Path) -> None:
    spec = read_spec(ablation_spec(corpus))
    assert spec.study.pruner.name == "none"  # an arm is never cut by another arm's speed
    assert spec.ablation is not None and spec.ablation.equal_unit == "bytes"
    # The baseline trains its max_tokens; the other arm the same text at its own rate.
    rates = {260: budget.TextRate(1.0, 1.0, True), 1024: budget.TextRate(3.0, 3.0, True)}
    base = space.trial_config(
        spec, {"vocab_size": 1024, "seed": 0}, rates=lambda c: rates[c.vocab_size]
    )
    other = space.trial_config(
        spec, {"vocab_size": 260, "seed": 0}, rates=lambda c: rates[c.vocab_size]
    )
    assert base.max_bytes == other.max_bytes == 4_000 * 3
    assert base.max_tokens == 4_000 and other.max_tokens == 12_000
    assert other.eval_every_bytes == TINY["eval_every_tokens"] * 3
    # At equal tokens when asked, and an ablation of something else stays in tokens.
    tokens = read_spec(ablation_spec(corpus, ablation={"equal": "tokens"}))
    assert space.trial_config(tokens, {"vocab_size": 260, "seed": 0}).max_tokens == 4_000
    width_data = ablation_spec(corpus, ablation={"baseline": {"d_ff": 32}, "vary": {"d_ff": [8]}})
    width = read_spec(width_data)
    assert width.ablation is not None and width.ablation.equal_unit == "tokens"
    with pytest.raises(SweepsError, match=r"ablation\.equal"):
        read_spec(ablation_spec(corpus, ablation={"equal": "words"}))


def test_halving_rungs_are_in_the_budgets_unit(corpus: Path) -> None:
    data = spec_dict(
        "h",
        corpus,
        fixed={"max_bytes": 90_000, "eval_every_bytes": 10_000},
        space={"vocab_size": {"choices": [260, 1024]}},
        study={"pruner": {"name": "successive_halving", "min_bytes": 10_000}},
    )
    for key in ("max_tokens", "eval_every_tokens"):
        data["fixed"].pop(key)
    spec = read_spec(data)
    assert halving.unit(spec) == "bytes" and halving.rungs(spec) == (10_000, 30_000)
    data["study"]["pruner"] = {"name": "successive_halving", "min_tokens": 1_000}
    with pytest.raises(SweepsError, match="min_bytes"):
        read_spec(data)
    data["study"]["pruner"] = {"name": "successive_halving", "min_tokens": 1_000, "min_bytes": 5}
    with pytest.raises(SweepsError, match="give the first rung once"):
        read_spec(data)
    rate = budget.TextRate(3.0, 3.0, True)
    cfg = budget.resolve(TrainConfig(corpus="c", max_bytes=90_000, seq_len=16), rate)
    assert halving.rung_tokens(cfg, 30_000) == 10_000


# --- the effects table -------------------------------------------------------------------------


def _with_stopped(
    trials: pd.DataFrame, d_ff: int, seed: int, outcome: str, value: float = 3.0
) -> pd.DataFrame:
    trials.loc[len(trials)] = {
        "number": 100 + len(trials),
        "outcome": outcome,
        "param_d_ff": d_ff,
        "param_seed": seed,
        "seed": seed,
        "val_bpb": value,
    }
    return trials


def test_a_stopped_seed_is_named_tested_and_left_out_of_the_pairs_with_why() -> None:
    trials = table({256: [2.20, 2.21, 2.19], 1: [2.30, 2.33]})  # d_ff=1 seed 2 collapsed
    trials = _with_stopped(trials, 1, 2, "unigram_collapse", 2.9)
    result = fx.effects(trials, study="s", baseline={"d_ff": 256})
    row = result.rows[1]
    assert row.n == 2 and [(s.seed, s.outcome) for s in row.stopped] == [(2, "unigram_collapse")]
    assert row.comparison.n_pairs == 2 and row.comparison.unpaired == (2,)
    assert "seed 2: unigram_collapse here" in row.verdict
    assert row.stopped_p == pytest.approx(stats.fisher_exact([[1, 2], [0, 3]]).pvalue)
    data = result.as_dict()
    assert data["stopped"] == [
        {
            "config": "d_ff=1",
            "seed": 2,
            "outcome": "unigram_collapse",
            "trial": row.stopped[0].trial,
        }
    ]
    assert data["tests_corrected"] == 1
    text = fx.markdown(result)
    assert "seed 2: unigram_collapse (p 1.000 vs baseline)" in text
    assert "Holm-corrected across the 1 test run" in text  # one test, not "2 comparisons"
    # As a value: its last evaluation joins the pairs.
    as_value = fx.effects(trials, study="s", baseline={"d_ff": 256}, stopped="as-value")
    assert as_value.rows[1].n == 3 and as_value.rows[1].comparison.n_pairs == 3
    assert "last evaluation" in fx.markdown(as_value)
    with pytest.raises(SweepsError, match="--stopped"):
        fx.effects(trials, study="s", baseline={"d_ff": 256}, stopped="drop")


def test_identical_paired_differences_are_no_test() -> None:
    result = fx.effects(table({256: [2.0, 2.1], 1: [2.5, 2.6]}), study="s", baseline={"d_ff": 256})
    row = result.rows[1]
    assert row.comparison.test == "none" and math.isnan(row.p_holm)
    assert row.verdict.startswith("cannot tell: the 2 paired differences are identical")
    assert result.n_tests == 0


def test_each_arm_against_its_own_unigram_and_unequal_text_is_said() -> None:
    trials = table({1024: [2.95, 2.96], 4096: [2.42, 2.44]}).rename(
        columns={"param_d_ff": "param_vocab_size"}
    )
    trials["vocab_size"] = trials["param_vocab_size"]
    trials["tokenizer"] = "bpe"
    trials["unigram_bpb"] = trials["vocab_size"].map({1024: 2.96, 4096: 2.42})
    trials["train_bytes"] = trials["vocab_size"].map({1024: 300_000.0, 4096: 420_000.0})
    result = fx.effects(trials, study="s", baseline={"vocab_size": 1024})
    base, arm = result.rows
    assert base.gap == pytest.approx(0.005) and arm.gap == pytest.approx(-0.01)
    assert arm.verdict.startswith("better; but this arm and the baseline did not beat")
    assert "1.4x different amounts of text" in result.text_warning
    assert "max_bytes" in fx.markdown(result)
    trials["train_bytes"] = 300_000.0  # equal text: nothing to say
    assert fx.effects(trials, study="s", baseline={"vocab_size": 1024}).text_warning == ""


def test_seeds_come_out_of_a_frame_as_python_ints() -> None:
    # A nullable integer column gives numpy integers, which isinstance(s, int) refuses: the
    # confirm plan then thought no seed was used and reused the source's (issue 34, item 1).
    trials = pd.DataFrame({"seed": pd.Series([0, 1, 2], dtype="Int64"), "param_seed": [0, 1, 2]})
    assert [type(s) for s in fx.seeds_of(trials)] == [int, int, int]


# --- real studies ------------------------------------------------------------------------------


@pytest.mark.study
def test_a_vocabulary_ablation_runs_at_equal_text_and_names_what_its_vocabulary_drops(
    tmp_path: Path, corpus: Path
) -> None:
    """bpe 1024 against bpe 260 and word 1024 at equal bytes: every arm's text within one
    sequence; the word arm, whose <unk> targets are "most" here (max_unk_targets = 0.05 for
    the test), is stopped at its first evaluation however short its run, and effects names
    each seed."""
    spec = ablation_spec(
        corpus,
        fixed={"eval_every_tokens": 1_000},
        ablation={
            "baseline": {"tokenizer": "bpe", "vocab_size": 1024},
            "vary": {"tokenizer": ["word"], "vocab_size": [260]},
        },
        limits={"collapse": {"max_unk_targets": 0.05}},
    )
    (tmp_path / "abl.toml").write_text(toml_text(spec))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    dry = sweeps_run("run", "abl.toml", "--storage", url, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    flat = " ".join(dry.stdout.split())
    assert "equal text (the default for an [ablation] that varies the vocabulary)" in flat
    assert "<unk> bytes" in flat
    ran = sweeps_run(
        "run", "abl.toml", "--storage", url, "--workers", "1", cwd=tmp_path, timeout=600
    )
    assert ran.returncode == 0, ran.stderr
    trials = study_trials(url, "abl")
    by_arm: dict[tuple, list] = {}
    for t in trials:
        cfg = t.user_attrs["config"]
        by_arm.setdefault((cfg["tokenizer"], cfg["vocab_size"]), []).append(t)
    complete = [t for arm, ts in by_arm.items() for t in ts if arm[0] == "bpe"]
    rates = {arm: ts[0].user_attrs["config"]["bytes_per_token"] for arm, ts in by_arm.items()}
    for t in complete:
        assert t.user_attrs["outcome"] == "complete"
        assert abs(t.user_attrs["train_bytes"] - t.user_attrs["config"]["max_bytes"]) <= 16 * max(
            rates.values()
        )
    for t in by_arm[("word", 1024)]:
        assert t.user_attrs["outcome"] == "unk_dominated", t.user_attrs["reason"]
        assert "of the validation targets" in t.user_attrs["reason"]
        assert t.user_attrs["last_eval_step"] < 200  # judged before min_steps
        assert "<unk> stands for" in t.user_attrs["unk_note"]
    proc = sweeps_run("effects", "abl", "--storage", url, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert sorted((s["seed"], s["outcome"]) for s in data["stopped"]) == [
        (0, "unk_dominated"),
        (1, "unk_dominated"),
    ]
    shown = sweeps_run("effects", "abl", "--storage", url, "--markdown", cwd=tmp_path)
    assert "seed 0: unk_dominated, seed 1: unk_dominated" in shown.stdout


@pytest.mark.study
def test_vocabularies_under_a_token_budget_are_said_to_be_unequal(
    tmp_path: Path, corpus: Path
) -> None:
    """A search over vocab_size under max_tokens: the dry run says so, with each arm's bytes
    where it is tokenized; the report repeats it from the trials' recorded text."""
    from lm.tokens import load_tokens

    for vocab in (260, 1024):
        load_tokens(corpus, "bpe", vocab)  # tokenized: the dry run reads, never builds
    spec = spec_dict(
        "toks",
        corpus,
        fixed={"tokenizer": "bpe"},
        space={"vocab_size": {"choices": [260, 1024]}},
        enqueue=[{"vocab_size": 260}, {"vocab_size": 1024}],
        study={"n_trials": 2},
    )
    (tmp_path / "s.toml").write_text(toml_text(spec))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    dry = sweeps_run("run", "s.toml", "--storage", url, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    flat = " ".join(dry.stdout.split())
    assert "unequal arms" in flat and "give max_bytes (equal text)" in flat
    assert "tokenizer=bpe vocab_size=260" in flat and "x different amounts of text" in flat
    ran = sweeps_run("run", "s.toml", "--storage", url, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert "different amounts of text" in " ".join(ran.stderr.split())
    out = tmp_path / "r.html"
    report = sweeps_run("report", "toks", "--storage", url, "--out", str(out), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "unequal text: the vocabularies trained on" in out.read_text()


@pytest.mark.study
def test_a_halving_study_under_max_bytes_reads_its_rungs_at_equal_text(
    tmp_path: Path, corpus: Path
) -> None:
    """Each trial reaches each rung at its own tokens (recorded), the same bytes for all."""
    fixed = {
        "tokenizer": "bpe",
        "max_bytes": 18_000,
        "eval_every_bytes": 2_000,
        "eval_bytes": 2_000,
    }
    spec = spec_dict(
        "halve",
        corpus,
        fixed=fixed,
        space={"vocab_size": {"choices": [260, 1024]}, "seed": {"choices": [0, 1]}},
        study={
            "n_trials": 4,
            "pruner": {"name": "successive_halving", "min_bytes": 2_000, "min_trials": 9},
        },
        enqueue=[{"vocab_size": v, "seed": s} for v in (260, 1024) for s in (0, 1)],
    )
    for key in ("max_tokens", "eval_every_tokens", "eval_tokens"):
        spec["fixed"].pop(key)
    (tmp_path / "h.toml").write_text(toml_text(spec))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    ran = sweeps_run("run", "h.toml", "--storage", url, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr
    seen = {}
    for t in study_trials(url, "halve"):
        points = t.user_attrs["rung_tokens"]
        per = t.user_attrs["config"]["bytes_per_token"]
        assert set(points) == {"2000", "6000"}
        for rung, tokens in points.items():
            assert abs(tokens * per - int(rung)) <= per  # the rung's bytes, at its own rate
        seen[t.user_attrs["config"]["vocab_size"]] = points
    assert seen[260]["2000"] > 2 * seen[1024]["2000"]  # different tokens, the same text


@pytest.mark.study
def test_a_repeated_proposal_is_copied_not_trained(tmp_path: Path, corpus: Path) -> None:
    """A space of one point: the sampler can only repeat it. The second trial records the
    first's result as a copy, trains nothing, and Optuna sees the same value."""
    spec = spec_dict(
        "dup",
        corpus,
        fixed={"tokenizer": "word", "vocab_size": 300},
        space={"d_ff": {"choices": [16]}},
        study={"n_trials": 2},
    )
    (tmp_path / "d.toml").write_text(toml_text(spec))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    ran = sweeps_run("run", "d.toml", "--storage", url, "--workers", "1", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    first, second = sorted(study_trials(url, "dup"), key=lambda t: t.number)
    assert first.user_attrs["train_s"] > 0 and second.user_attrs["train_s"] == 0
    assert second.user_attrs["copy_of"] == first.number
    assert (
        second.values == first.values
        and second.user_attrs["val_bpb"] == first.user_attrs["val_bpb"]
    )
    assert second.user_attrs["reason"].startswith(f"copy of trial {first.number}")
    # A short word-300 trial (31 steps: under_trained) is not a plain complete: what its
    # vocabulary drops is in its reason.
    assert first.user_attrs["outcome"] == "complete" and "under_trained" in first.user_attrs
    assert "<unk> stands for" in first.user_attrs["reason"]
    assert not (tmp_path / "runs" / "dup" / "trials" / str(second.number)).exists()
    # The copy is no second replicate of the configuration.
    reps = rp.replicates_frame(url, "dup")
    assert list(reps["n"]) == [1]


def test_a_word_300_dry_run_states_its_unk_share(tmp_path: Path, corpus: Path) -> None:
    from lm import tokens

    rate = tokens.measured_rate(corpus, "word", 300)  # tokenized: the dry run reads it
    spec = spec_dict(
        "w300",
        corpus,
        fixed={"tokenizer": "word", "vocab_size": 300},
        space={"d_ff": {"choices": [16, 32]}},
    )
    (tmp_path / "w.toml").write_text(toml_text(spec))
    dry = sweeps_run(
        "run",
        "w.toml",
        "--dry-run",
        "--storage",
        f"sqlite:///{tmp_path / 'db.sqlite'}",
        cwd=tmp_path,
    )
    assert dry.returncode == 0, dry.stderr
    row = next(line for line in dry.stdout.splitlines() if "tokenizer=word" in line)
    assert f"{rate.unk_tokens:.1%}" in row and f"{rate.unk_bytes:.1%}" in row


def test_the_report_gives_each_word_vocabularys_unk_share() -> None:
    from sweeps.charts import vocab

    trials = pd.DataFrame(
        {
            "tokenizer": ["word", "word", "bpe"],
            "vocab_size": [300, 300, 1024],
            "unk_rate_targets": [0.31, 0.33, 0.0],
            "unk_byte_rate": [0.46, 0.48, 0.0],
        }
    )
    assert vocab.unk_shares(trials) == (
        "300 words: 32.0% of the validation tokens, 47.0% of their bytes"
    )
    assert vocab.unk_shares(trials[trials["tokenizer"] == "bpe"]) == ""
