"""The CLI's help as a user reads it: every option shows its default, flags take no value,
nothing in a help string is swallowed; ``--version``; shell completion."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import typer
import typer.main

from sweeps.cli import app
from tests.sweeps.cli import sweeps


def commands() -> list[tuple[str, Any]]:
    """(name, command) of every sub-command (Typer's own click: duck-typed)."""
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    return [(name, root.get_command(ctx, name)) for name in root.list_commands(ctx)]


def option_helps(command: Any) -> list[tuple[Any, str]]:
    ctx = typer.Context(command, info_name=command.name)
    return [
        (p, p.get_help_record(ctx)[1])
        for p in command.get_params(ctx)
        if p.param_type_name == "option" and p.get_help_record(ctx) is not None
    ]


@pytest.mark.parametrize(("name", "command"), commands())
def test_every_option_shows_its_default(name: str, command: Any) -> None:
    missing = [
        p.opts[0]
        for p, text in option_helps(command)
        if "[default:" not in text
        and "[required]" not in text
        and not (p.is_flag and p.default in (False, None))
        and p.name != "help"
        and not (name in ("train", "estimate") and p.name == "corpus")
    ]
    assert missing == [], name


@pytest.mark.parametrize(("name", "command"), commands())
def test_no_help_string_lost_text(name: str, command: Any) -> None:
    for option, text in option_helps(command):
        assert " ." not in text and not text.endswith(" "), (name, option.opts, text)


def test_flags_show_no_value_and_brackets_survive() -> None:
    proc = sweeps("run", "--help")
    assert proc.returncode == 0
    assert "<bool>" not in proc.stdout
    assert "pip install -e '.[ray]'" in " ".join(proc.stdout.split())
    assert "[default: $SWEEPS_STORAGE" in proc.stdout
    train = " ".join(sweeps("train", "--help").stdout.split())
    assert "[default: 50_000]" in train and "[default: 4096; byte: 260]" in train


def test_version_and_completion() -> None:
    from importlib.metadata import version

    proc = sweeps("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"sweeps {version('sweeps')}"
    # Typer detects the user's shell from the process tree; under `make` that is sh, which it
    # does not support. Its own test switch makes --show-completion take the shell by name.
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0 and "complete -o" in proc.stdout, proc.stderr
