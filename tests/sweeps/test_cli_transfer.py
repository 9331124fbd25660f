"""``sweeps transfer coord``: the coordinate check from the CLI (flags or a spec), its table, its
``--out`` files, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lm.coord import LAYERS
from tests.sweeps.cli import assert_user_error, sweeps_here

#: A tiny model: widths 16 and 32 at d_head 8, two steps (seconds on the CPU).
FLAGS = [
    "--tokenizer",
    "byte",
    "--d-model",
    "16",
    "--n-heads",
    "2",
    "--d-ff",
    "32",
    "--n-layers",
    "1",
    "--seq-len",
    "16",
    "--batch-size",
    "4",
    "--lr",
    "0.01",
    "--base-width",
    "16",
    "--device",
    "cpu",
]


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")


def test_coord_prints_the_table_and_writes_the_chart_and_rows(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "coord"
    proc = sweeps_here(
        "transfer",
        "coord",
        *FLAGS,
        "--corpus",
        str(corpus),
        "--widths",
        "16,32",
        "--steps",
        "2",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "RMS at step 2" in lines[0] and "base_width 16" in lines[0]
    for p in ("sp", "mup"):
        for layer in LAYERS:
            assert any(line.split()[:2] == [p, layer] for line in lines), (p, layer)
    rows = json.loads((out / "coord.json").read_text())
    assert len(rows) == 2 * 2 * 2 * len(LAYERS)  # parametrizations x widths x steps x layers
    assert set(rows[0]) == {"parametrization", "width", "step", "layer", "rms"}
    assert {r["width"] for r in rows} == {16, 32}
    html = (out / "coord.html").read_text()
    assert "plotly" in html and "coordinate check" in html


def test_coord_reads_a_specs_corpus_and_fixed_fields(corpus: Path, tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(
        "\n".join(
            [
                "[study]",
                'name = "s"',
                "n_trials = 1",
                "[corpus]",
                f"dir = {json.dumps(str(corpus))}",
                "[fixed]",
                'tokenizer = "byte"',
                "d_model = 16",
                "n_heads = 2",
                "d_ff = 32",
                "n_layers = 1",
                "seq_len = 16",
                "batch_size = 4",
                "base_width = 32",
                'device = "cpu"',
                "[space]",
                "lr = [0.01, 0.02]",
            ]
        )
        + "\n"
    )
    proc = sweeps_here("transfer", "coord", str(spec), "--widths", "16,32", "--steps", "1")
    assert proc.returncode == 0, proc.stderr
    assert "base_width 32" in proc.stdout.splitlines()[0]  # the spec's [fixed]
    # A flag wins over the spec.
    proc = sweeps_here(
        "transfer", "coord", str(spec), "--widths", "16,32", "--steps", "1", "--base-width", "16"
    )
    assert proc.returncode == 0 and "base_width 16" in proc.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--widths", "32"], ["--widths", "two or more"]),
        (["--widths", "16,20"], ["width 20", "d_head=8"]),
        (["--steps", "0"], ["--steps"]),
        (["--parametrization", "mu"], ["parametrization", "'mu'"]),
    ],
)
def test_coord_mistakes_are_one_line(corpus: Path, args: list[str], needles: list[str]) -> None:
    proc = sweeps_here("transfer", "coord", *FLAGS, "--corpus", str(corpus), *args)
    assert_user_error(proc, *needles)


def test_coord_trains_on_the_built_in_synthetic_corpus_by_default(tmp_path: Path) -> None:
    proc = sweeps_here("transfer", "coord", *FLAGS, "--widths", "16,32", "--steps", "1")
    assert proc.returncode == 0, proc.stderr
    assert any(line.split()[:2] == ["mup", "logits"] for line in proc.stdout.splitlines())
