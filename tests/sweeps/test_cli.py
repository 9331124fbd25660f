"""The CLI as a user runs it: real processes, exit codes, one-line errors, nothing half-written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.sweeps.cli import assert_user_error, sweeps


@pytest.fixture(scope="module")
def cli_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A corpus made by ``sweeps prepare`` as a user runs it (checking what it prints)."""
    out = tmp_path_factory.mktemp("cli") / "demo"
    proc = sweeps("prepare", "--synthetic", "--size", "400KB", "--seed", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for word in ("questions", "answered questions", "pairs", "train / val bytes"):
        assert word in proc.stdout
    return out


def test_help_lists_the_commands() -> None:
    proc = sweeps("--help")
    assert proc.returncode == 0
    for command in ("prepare", "tokenize", "train", "generate", "demo", "effects", "confirm"):
        assert command in proc.stdout


def test_prepare_refuses_to_overwrite_without_force(cli_corpus: Path) -> None:
    before = (cli_corpus / "manifest.json").read_text()
    assert_user_error(
        sweeps("prepare", "--synthetic", "--size", "100KB", "--out", str(cli_corpus)),
        "already exists",
        "--force",
    )
    assert (cli_corpus / "manifest.json").read_text() == before


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no such file"),
        ("dir", "directory"),
        ("just some text\n", "not an XML file"),
        (
            '<?xml version="1.0"?>\n<!DOCTYPE posts [<!ENTITY a "aaaaaaaaaa">'
            '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
            '<posts><row Id="1" Body="&b;"/></posts>',
            "entit",
        ),
        ('<?xml version="1.0"?>\n<users><row Id="1"/></users>', "users"),
        (
            '<?xml version="1.0"?>\n<posts><row Id="1" PostTypeId="1" Title="t" Body="b"/>',
            "truncated",
        ),
        (
            '<?xml version="1.0"?>\n<posts><row Id="1" PostTypeId="1" Title="t" Body="b"/></posts>',
            "pairs",
        ),
    ],
)
def test_prepare_bad_input_is_one_line_and_leaves_nothing(
    tmp_path: Path, content: str | None, needle: str
) -> None:
    source = tmp_path / "Posts.xml"
    if content == "dir":
        source.mkdir()
    elif content is not None:
        source.write_text(content)
    out = tmp_path / "out"
    assert_user_error(sweeps("prepare", str(source), "--out", str(out)), needle)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["Posts.xml"] if content else [])


def test_tokenize_summary_then_cache_hit(cli_corpus: Path) -> None:
    first = sweeps("tokenize", str(cli_corpus), "--tokenizer", "word", "--vocab-size", "300")
    assert first.returncode == 0, first.stderr
    assert "built" in first.stdout and "<unk> rate" in first.stdout
    second = sweeps("tokenize", str(cli_corpus), "--tokenizer", "word", "--vocab-size", "300")
    assert second.returncode == 0 and "hit" in second.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--tokenizer", "sentencepiece"], "sentencepiece"),
        (["--tokenizer", "word", "--vocab-size", "3"], "--vocab-size 3 is too small"),
        (["--tokenizer", "bpe", "--vocab-size", "100"], "use --vocab-size 260"),
    ],
)
def test_tokenize_bad_arguments(cli_corpus: Path, args: list[str], needle: str) -> None:
    cache = cli_corpus / "cache"
    before = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert_user_error(sweeps("tokenize", str(cli_corpus), *args), needle)
    after = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert after == before


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--d-ff", "0"], "d_ff=0"),
        (["--d-model", "100", "--n-heads", "3"], "n_heads=3"),
        (["--seq-len", "1"], "seq_len=1"),
        (["--batch-size", "0"], "batch_size=0"),
        (["--grad-accum", "0"], "grad_accum=0"),
        (["--lr", "0"], "lr=0"),
        (["--precision", "fp8"], "fp8"),
        (["--attention", "flash"], "flash"),
        (["--precision", "fp16", "--device", "cpu"], "fp16"),
    ],
)
def test_train_bad_config_writes_nothing(
    cli_corpus: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    assert_user_error(
        sweeps("train", "--corpus", str(cli_corpus), "--out", str(out), *args), needle
    )
    assert not out.exists()


def test_train_missing_corpus_and_bad_toml(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert_user_error(
        sweeps("train", "--corpus", str(tmp_path / "nope"), "--out", str(out)), "nope"
    )
    bad = tmp_path / "run.toml"
    bad.write_text("d_model = [\n")
    assert_user_error(sweeps("train", "--config", str(bad), "--out", str(out)), "run.toml")
    typo = tmp_path / "typo.toml"
    typo.write_text(f'corpus = "{tmp_path}"\nd_modle = 64\n')
    assert_user_error(sweeps("train", "--config", str(typo), "--out", str(out)), "d_modle")
    assert not out.exists()


@pytest.mark.study
def test_train_json_then_generate(cli_corpus: Path, tmp_path: Path) -> None:
    """The train-then-generate path as a user types it, one process per command (the cost is
    their start-up, so each command runs once for all it checks): flags over the file, the
    ``--json`` summary, ``generate`` from the run's directory into a pipe (the prompt continued,
    the text exactly as the library generates it, no line broken), a missing run named, a
    run's own config.json rerunning it to the same result, a bad JSON config named."""
    config = tmp_path / "run.toml"
    config.write_text(
        f'corpus = "{cli_corpus}"\ntokenizer = "bpe"\nvocab_size = 300\nd_model = 32\n'
        "n_layers = 1\nn_heads = 2\nd_ff = 64\nseq_len = 32\nbatch_size = 8\n"
        "max_tokens = 4096\neval_every_tokens = 4096\neval_tokens = 512\n"
    )
    out = tmp_path / "run"
    # Flags override the file.
    proc = sweeps("train", "--config", str(config), "--d-ff", "32", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["outcome"] == "complete"
    assert json.loads((out / "config.json").read_text())["d_ff"] == 32
    assert summary["final_metrics"]["val_bpb"] > 0
    assert_user_error(sweeps("generate", str(tmp_path / "missing")), "missing")
    # Into a pipe, the text as generated: the prompt continued, no line broken at 80 columns.
    from lm.generate import generate
    from sweeps.console import escape_controls

    long = sweeps("generate", str(out), "--prompt", "<Q>How do I", "--max-new-tokens", "300")
    assert long.returncode == 0, long.stderr
    assert long.stdout.startswith("<Q>How do I")
    text = generate(out, "<Q>How do I", max_new_tokens=300, temperature=0.8, top_k=None, seed=0)
    assert long.stdout == escape_controls(text, keep_newlines=True) + "\n" and len(text) > 80
    # A run's own config.json reruns it exactly.
    again = tmp_path / "again"
    proc = sweeps("train", "--config", str(out / "config.json"), "--out", str(again), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((again / "config.json").read_text()) == json.loads(
        (out / "config.json").read_text()
    )
    assert (
        json.loads(proc.stdout)["final_metrics"]["val_bpb"] == summary["final_metrics"]["val_bpb"]
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert_user_error(
        sweeps("train", "--config", str(bad), "--out", str(again / "x")),
        "bad.json",
        "not valid JSON",
    )


@pytest.mark.study
def test_train_warns_when_the_budget_is_shorter_than_warmup_and_eval_interval(
    corpus: Path, tmp_path: Path
) -> None:
    args = [
        "train",
        "--corpus",
        str(corpus),
        "--tokenizer",
        "byte",
        "--d-model",
        "16",
        "--n-layers",
        "1",
        "--n-heads",
        "2",
        "--d-ff",
        "32",
        "--seq-len",
        "16",
        "--batch-size",
        "8",
        "--eval-tokens",
        "256",
        "--max-tokens",
        "1024",
        "--json",
    ]
    proc = sweeps(*args, "--out", str(tmp_path / "short"))
    assert proc.returncode == 0, proc.stderr
    assert "warning: warmup_tokens 50,000 >= max_tokens 1,024" in proc.stderr
    assert "warning: eval_every_tokens 250,000 >= max_tokens 1,024" in proc.stderr
    proc = sweeps(
        *args,
        "--warmup-tokens",
        "128",
        "--eval-every-tokens",
        "512",
        "--out",
        str(tmp_path / "fine"),
    )
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


@pytest.mark.study
def test_train_prints_the_training_flops_and_takes_the_wsd_flags(
    corpus: Path, tmp_path: Path
) -> None:
    """The summary's FLOPs are what a study records for the run (``lm.flops.trained``), its
    cooldown read's branch included."""
    from lm import flops
    from lm.run_files import read_config, read_result

    out = tmp_path / "run"
    proc = sweeps(
        "train",
        "--corpus",
        str(corpus),
        "--tokenizer",
        "byte",
        "--d-model",
        "16",
        "--n-layers",
        "1",
        "--n-heads",
        "2",
        "--d-ff",
        "32",
        "--seq-len",
        "16",
        "--batch-size",
        "8",
        "--eval-tokens",
        "256",
        "--max-tokens",
        "2048",
        "--warmup-tokens",
        "256",
        "--eval-every-tokens",
        "1024",
        "--lr-schedule",
        "wsd",
        "--cooldown-reads",
        "512",
        "--cooldown-fraction",
        "0.5",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    result = read_result(out)
    assert result.n_reads == 1 and result.cooldown_tokens_total == 256
    counted = flops.trained(read_config(out), result.to_dict())
    assert counted.flops == counted.flops_per_token * (2048 + 256)
    assert re.search(rf"training FLOPs +{re.escape(f'{counted.flops:.3g}')}\s", proc.stdout)
    assert re.search(r"cooldown reads +1 \(256 tokens\)", proc.stdout)
    assert "cooldown read @" in proc.stderr
