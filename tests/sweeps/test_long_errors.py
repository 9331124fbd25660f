"""Huge inputs quoted in an error (issue 24, item 11): a 1 MB ``when`` literal gave a 2 MB error
line, a 5 MB choice 10 MB, a 100 KB study name 100 KB. An error line now shows at most
``MAX_LINE_CHARS``: its start (what is wrong) and its end (how to fix it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.text import MAX_LINE_CHARS, elide
from tests.shared import shared_corpus
from tests.sweeps.cli import assert_user_error, sweeps
from tests.sweeps.helpers import spec_dict, toml_text


def test_elide_keeps_the_start_and_the_fix() -> None:
    text = "what: " + "x" * 10**6 + " fix: do this"
    short = elide(text)
    assert len(short) <= MAX_LINE_CHARS and short.startswith("what: ")
    assert short.endswith(" fix: do this") and "characters]" in short
    assert elide("short") == "short"


@pytest.mark.parametrize("case", ["when", "choice"])
def test_a_huge_literal_in_a_spec_is_a_short_line(
    case: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    huge = "z" * (1_000_000 if case == "when" else 5_000_000)
    space = (
        {"lr": {"low": 0.001, "high": 0.01, "when": f"tokenizer == '{huge}'"}}
        if case == "when"
        else {"tokenizer": {"choices": ["word", huge]}}
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        toml_text(spec_dict("long", shared_corpus(tmp_path_factory), space=space)), encoding="utf-8"
    )
    proc = sweeps("run", str(spec), "--dry-run", cwd=tmp_path)
    assert_user_error(proc)
    assert len(proc.stderr) <= MAX_LINE_CHARS + 1, len(proc.stderr)


def test_a_huge_study_name_is_a_short_line(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    import optuna

    optuna.create_study(storage=f"sqlite:///{db}", study_name="there")
    proc = sweeps("trials", "n" * 100_000, "--storage", f"sqlite:///{db}")
    assert_user_error(proc)
    assert len(proc.stderr) <= MAX_LINE_CHARS + 1, len(proc.stderr)
