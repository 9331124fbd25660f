"""``sweeps estimate`` as a user runs it: one config term by term, or a study's feasibility."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lm.memory import TERM_ORDER
from tests.sweeps.cli import assert_user_error, sweeps

ISSUE_EXAMPLE = [
    "--vocab-size",
    "300",
    "--tokenizer",
    "word",
    "--d-model",
    "200",
    "--n-layers",
    "1",
    "--d-ff",
    "800",
    "--seq-len",
    "254",
    "--batch-size",
    "1000",
    "--precision",
    "fp32",
    "--device",
    "cpu",
]


def test_json_has_the_textbook_terms_and_the_budget() -> None:
    proc = sweeps("estimate", *ISSUE_EXAMPLE, "--budget", "16GiB", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["vocab_size"] == 300
    assert out["params_ffn_per_layer"] == 200 * 800 + 800 + 800 * 200 + 200  # 321,000
    assert out["params_attention_per_layer"] == 160_800
    assert out["params_embedding"] == 300 * 200
    assert out["params_total"] == 593_800
    b = out["bytes"]
    assert b["logits"] == 1000 * 254 * 300 * 4
    assert b["attention_scores"] == 1000 * 4 * 254 * 4  # sdpa: no T x T term
    assert b["total"] == sum(out["at_peak"].values())
    assert out["budget_bytes"] == 16 * 2**30 and out["fits"] is True
    assert set(TERM_ORDER) <= set(b)
    proc = sweeps("estimate", *ISSUE_EXAMPLE, "--budget", "1GiB", "--json")
    assert json.loads(proc.stdout)["fits"] is False


def test_table_prints_every_term_with_its_formula_and_the_total() -> None:
    proc = sweeps("estimate", *ISSUE_EXAMPLE, "--attention", "naive", "--budget", "16GiB")
    assert proc.returncode == 0, proc.stderr
    for name in TERM_ORDER:
        assert name in proc.stdout, name
    assert "B x T x V x 4" in proc.stdout
    assert "L x B x H x T x T x s" in proc.stdout  # naive keeps the scores
    assert "total" in proc.stdout and "budget 16.0 GiB" in proc.stdout


def test_config_file_and_flags(tmp_path: Path) -> None:
    run = tmp_path / "run.toml"
    run.write_text(
        'tokenizer = "byte"\nvocab_size = 260\nseq_len = 64\nbatch_size = 4\ndevice = "cpu"\n'
    )
    proc = sweeps("estimate", "--config", str(run), "--batch-size", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bytes"]["logits"] == 8 * 64 * 260 * 4  # the flag wins


SPEC = """
[study]
name = "fit-or-not"
sampler = "{sampler}"
n_trials = 8
objectives = ["val_bpb"]

[corpus]
synthetic = {{ size = "300KB", seed = 0 }}
out = "corpus"

[fixed]
device = "cpu"
tokenizer = "word"
d_model = 200
n_layers = 1
d_ff = 800
seq_len = 254

[space.vocab_size]
choices = [300, 600]

[space.batch_size]
choices = [1, 1000]
{extra}
[limits]
memory_budget = "2GiB"
oom_policy = "{policy}"
"""


def write_spec(tmp_path: Path, policy: str = "prune", extra: str = "") -> Path:
    path = tmp_path / f"{policy}.toml"
    sampler = "random" if extra else "grid"
    path.write_text(SPEC.format(policy=policy, extra=extra, sampler=sampler))
    return path


def test_feasibility_table_over_the_grid(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    proc = sweeps("estimate", str(spec), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["points"] == "grid" and out["budget_bytes"] == 2 * 2**30
    assert len(out["rows"]) == 4
    fits = {(r["params"]["vocab_size"], r["params"]["batch_size"]): r["fits"] for r in out["rows"]}
    assert fits == {(300, 1): True, (600, 1): True, (300, 1000): False, (600, 1000): False}
    assert out["fit"] == 2
    # The text table and a --budget that overrides the spec's.
    proc = sweeps("estimate", str(spec), "--budget", "16GiB")
    assert proc.returncode == 0, proc.stderr
    assert "4 of 4 points fit" in proc.stdout and "16.0 GiB" in proc.stdout


def test_feasibility_with_fit_policy_shows_the_fitted_batch(tmp_path: Path) -> None:
    proc = sweeps("estimate", str(write_spec(tmp_path, "fit")), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert all(r["fits"] for r in rows)
    fitted = [r["fitted"] for r in rows if r["params"]["batch_size"] == 1000]
    assert all(f and f["batch_size"] * f["grad_accum"] == 1000 for f in fitted)
    proc = sweeps("estimate", str(write_spec(tmp_path, "fit")))
    assert "fitted to batch_size" in proc.stdout


def test_a_space_without_a_grid_is_sampled(tmp_path: Path) -> None:
    extra = '\n[space.lr]\ntype = "float"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n'
    spec = write_spec(tmp_path, extra=extra)
    proc = sweeps("estimate", str(spec), "--samples", "6", "--sample-seed", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["points"].startswith("sample of 6")
    assert len(out["rows"]) == 6
    assert all(1e-4 <= r["params"]["lr"] <= 1e-2 for r in out["rows"])
    again = json.loads(
        sweeps("estimate", str(spec), "--samples", "6", "--sample-seed", "1", "--json").stdout
    )
    assert again["rows"] == out["rows"]  # seeded


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--budget", "lots"], "--budget"),
        (["--precision", "fp16"], "fp16"),
        (["--d-ff", "0"], "d_ff"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_user_errors_are_one_line(args: list[str], needle: str) -> None:
    assert_user_error(sweeps("estimate", *ISSUE_EXAMPLE, *args), needle)


def test_missing_spec_and_spec_with_config(tmp_path: Path) -> None:
    assert_user_error(sweeps("estimate", str(tmp_path / "nope.toml")), "does not exist")
    run = tmp_path / "run.toml"
    run.write_text("batch_size = 2\n")
    assert_user_error(
        sweeps("estimate", str(write_spec(tmp_path)), "--config", str(run)), "not both"
    )


def test_a_config_that_does_not_fit_exits_1_after_saying_so() -> None:
    proc = sweeps("estimate", *ISSUE_EXAMPLE, "--budget", "100MiB")
    assert proc.returncode == 1, proc.stderr
    assert "does NOT fit" in proc.stdout
    proc = sweeps("estimate", *ISSUE_EXAMPLE, "--budget", "100MiB", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["fits"] is False


def test_a_study_none_of_whose_points_fit_exits_1(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    proc = sweeps("estimate", str(spec), "--budget", "1MiB", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["fit"] == 0
    assert sweeps("estimate", str(spec), "--json").returncode == 0  # 2 of 4 fit


def test_a_budget_shorter_than_warmup_or_eval_interval_is_warned_of(tmp_path: Path) -> None:
    proc = sweeps("estimate", *ISSUE_EXAMPLE, "--max-tokens", "30000")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("warning: warmup_tokens 50,000 >= max_tokens 30,000")
    assert lines[1].startswith("warning: eval_every_tokens 250,000 >= max_tokens 30,000")
    proc = sweeps(
        "estimate",
        *ISSUE_EXAMPLE,
        "--max-tokens",
        "30000",
        "--warmup-tokens",
        "3000",
        "--eval-every-tokens",
        "10000",
    )
    assert proc.returncode == 0 and "warning" not in proc.stderr
    # a study: over its points
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace("[fixed]", "[fixed]\nmax_tokens = 30000", 1))
    proc = sweeps("estimate", str(spec), "--json")
    assert "warning: 4 of 4 points of the grid, e.g. warmup_tokens 50,000" in proc.stderr
    # the flags apply to the study's points, as in its table
    proc = sweeps(
        "estimate", str(spec), "--warmup-tokens", "100", "--eval-every-tokens", "1000", "--json"
    )
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


def test_points_that_cannot_be_judged_are_marked(tmp_path: Path) -> None:
    """Too few optimizer steps (batch 1000: 4 steps) or too small a learning rate summed over
    them (lr 1e-6 over 3,938 steps: 0.004) are both marked: those trials run unjudged."""
    spec = write_spec(tmp_path, extra="\n[space.lr]\nchoices = [1e-6, 1e-2]\n")
    out = json.loads(sweeps("estimate", str(spec), "--json").stdout)
    marked = {
        (r["params"]["batch_size"], r["params"]["lr"]): r["under_trained"] for r in out["rows"]
    }
    assert marked == {(1, 1e-6): True, (1, 1e-2): False, (1000, 1e-6): True, (1000, 1e-2): True}
    assert out["under_trained"] == 6 and out["min_lr_sum"] == 0.5
    text = " ".join(sweeps("estimate", str(spec)).stdout.split())
    assert "3,938 (unjudged)" in text and "6 of 8 points get fewer than" in text
    assert "below limits.collapse.min_lr_sum = 0.5: they run unjudged" in text
