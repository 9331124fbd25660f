"""MkDocs hook (mkdocs.yml): the pages read the same in the site as on GitHub.

Links to the repository's own files outside ``docs/``: a page links to
``../studies/README.md#collapse`` so that the Markdown reads right where it lies, but MkDocs
knows only the files under ``docs/`` and would call that link broken. ``on_files`` adds each
repository file that a page links to outside ``docs/`` (and, for a Markdown file, what that one
links to in turn) to the site, under ``repo/``, so MkDocs checks the link and its anchor like
any other. A link to a file that does not exist is left alone: MkDocs reports it, and
``--strict`` fails the build on it. (A file added this way cannot link back into ``docs/``:
MkDocs resolves its links from ``../``; so the README, which links there, is no page here.)

``on_page_markdown``: a pipe inside a table's code span, which GitHub needs escaped, is shown
without the backslash."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

#: An inline link or image target: ``[text](target)``, ``![alt](target)``.
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Fenced blocks and inline code, where ``](x)`` is text, not a link.
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.S | re.M)


def repo_links(text: str) -> list[str]:
    """The relative link targets in Markdown ``text``, anchors and queries cut off."""
    out = []
    for target in LINK.findall(CODE.sub("", text)):
        path = re.split(r"[#?]", target, maxsplit=1)[0]
        if path and not re.match(r"[a-z][a-z0-9+.-]*:|/", path):  # no URL, no absolute path
            out.append(path)
    return out


def on_files(files: Files, config: Any) -> Files:
    docs = Path(config["docs_dir"])
    known = {f.src_uri for f in files}
    queue = [f.src_uri for f in files.documentation_pages()]
    while queue:
        page = queue.pop()
        for link in repo_links((docs / page).read_text(encoding="utf-8")):
            uri = posixpath.normpath(posixpath.join(posixpath.dirname(page), link))
            # Only files of this repository (one level up from docs/), and only those there.
            if not uri.startswith("../") or uri.startswith("../../") or uri in known:
                continue
            if not (docs / uri).is_file():
                continue
            known.add(uri)
            # Included outright: MkDocs' default exclusion of dot-paths would match the "..".
            file = File(
                uri,
                str(docs),
                config["site_dir"],
                config["use_directory_urls"],
                inclusion=InclusionLevel.INCLUDED,
            )
            file.dest_uri = "repo/" + file.dest_uri.removeprefix("../")
            files.append(file)
            if file.is_documentation_page():
                queue.append(uri)
    return files


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """A pipe in a table's code span is escaped (``\\|``) so that GitHub keeps the cell whole;
    Python-Markdown keeps such a cell whole by itself and would show the backslash."""

    def unescape(row: re.Match[str]) -> str:
        return re.sub(r"`[^`\n]*`", lambda code: code.group(0).replace("\\|", "|"), row.group(0))

    return re.sub(r"^\|.*$", unescape, markdown, flags=re.M)
