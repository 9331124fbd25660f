"""The documentation as a reader follows it: every relative link in the README and in ``docs/``
names a file that exists, and an anchor a heading that exists, the same on GitHub as in the
MkDocs site (``make docs`` checks the site's links itself, with ``--strict``); and the tables
that restate the code (the training fields, the CLI) say what the code says."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core
import typer.main

from sweeps.cli import app

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

#: An inline link or image target, ``[text](target)``; code is text, not links.
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.S | re.M)


def links(page: Path) -> list[tuple[str, str]]:
    """(path, anchor) of each relative link on ``page``: no URL, no absolute path."""
    out = []
    for target in LINK.findall(CODE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:|/", target):
            continue
        path, _, anchor = target.partition("#")
        out.append((path, anchor))
    return out


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings that GitHub and MkDocs (Python-Markdown's ``toc``)
    both give them: a link to one of these works in either."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    out = set()
    for heading in re.findall(r"^#+ +(.+?) *#*$", text, re.M):
        plain = re.sub(r"[`*]", "", heading)
        ascii_ = unicodedata.normalize("NFKD", plain).encode("ascii", "ignore").decode()
        mkdocs = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_).strip().lower())
        github = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
        if mkdocs == github:
            out.add(mkdocs)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_names_a_file_and_a_heading_that_exist(page: Path) -> None:
    broken = []
    for path, anchor in links(page):
        target = (page.parent / path).resolve() if path else page
        if not target.exists() or REPO not in target.parents:
            broken.append(f"{path}#{anchor}" if anchor else path)
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{path}#{anchor} (no such heading, or one GitHub spells otherwise)")
    assert broken == []


def test_the_readme_links_to_every_docs_page() -> None:
    """The README's map of the rest names each page of the reference."""
    named = {(REPO / path).resolve() for path, _ in links(REPO / "README.md")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in named] == []


def table(page: str, header: str) -> list[str]:
    """The rows of the Markdown table under ``header`` (its first line) on ``page``."""
    text = (REPO / page).read_text(encoding="utf-8")
    columns = header.count("|") - 1
    rule = "|" + "---|" * columns
    assert f"{header}\n{rule}\n" in text, f"{page} no longer has the table {header!r}"
    return text.split(f"{header}\n{rule}\n")[1].split("\n\n")[0].splitlines()


def test_the_training_fields_table_is_the_config_with_its_defaults() -> None:
    from sweeps.cli.options import config_reference

    assert table("docs/spec.md", "| field | default | meaning |") == [
        f"| `{f}` | {d} | {h} |" for f, d, h in config_reference()
    ]


def test_the_cli_table_names_every_command_and_only_options_they_take() -> None:
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    commands = {name: root.get_command(ctx, name) for name in root.list_commands(ctx)}

    def options(command: Any) -> set[str]:
        params = command.get_params(typer.Context(command))
        return {o for p in params for o in (*p.opts, *p.secondary_opts)}

    documented, unknown = set(), []
    for row in table("docs/cli.md", "| command | what it does |"):
        for usage in re.findall(r"`(sweeps [^`]*)`", row.split(" | ")[0]):
            name = usage.split()[1]  # a command, or a root option (`sweeps --version`)
            command = root if name.startswith("--") else commands.get(name)
            if command is not root and isinstance(command, typer.core.TyperGroup):
                documented.add(name)  # a sub-app's command: `sweeps transfer coord`
                name = f"{name} {usage.split()[2]}"
                command = command.get_command(ctx, usage.split()[2])
            if command is None:
                unknown.append(f"sweeps {name}")
                continue
            documented.add(name)
            taken = options(command)
            unknown += [f"{name} {o}" for o in re.findall(r"--\w[\w-]*", usage) if o not in taken]
    assert unknown == []
    assert sorted(set(commands) - documented) == []
