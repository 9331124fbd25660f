"""The import graph of ``sweeps/``, read from the code: rooms, floors, wings, and its picture.

A *room* is a top-level module of ``sweeps`` or a whole sub-package (``sweeps.cli``,
``sweeps.charts``, ``sweeps.engines``, ``sweeps.spec``: their modules count as one room). Room A
stands on room B when a module of A imports one of B, anywhere in its code (function-level
imports too; see ``tests.test_conventions._imports``). A room's *floor* is 1 for a room that
stands on no other and otherwise one more than the highest room it stands on; the building's
height is its highest floor. An arrow runs *up* when two rooms stand on each other, directly or
through others.

The two wings: the run wing (study, plan, workers, engines, admission, runner, the verdicts)
decides and runs trials; the analysis wing (results, effects, charts, report, ...) reads what
they stored and stands on the foundation (storage, the record, the spec) alone.

``python -m tests.structure`` prints the floors; ``--svg PATH`` draws the picture that
``docs/import-graph.svg`` holds (``tests/test_structure.py`` checks it is current).
"""

from __future__ import annotations

import argparse
import functools
import html
from collections.abc import Mapping
from pathlib import Path

from tests.test_conventions import _imports, _module_names

PACKAGE = "sweeps"
#: Rooms that read what the run wing stored; they may stand only on each other and on FOUNDATION.
ANALYSIS_WING = frozenset(
    {
        "sweeps.results",
        "sweeps.seeds",
        "sweeps.effects",
        "sweeps.effect_tables",
        "sweeps.failure_rates",
        "sweeps.replicates",
        "sweeps.charts",
        "sweeps.report",
        "sweeps.serve",
        "sweeps.scaling",
        "sweeps.stats",
        "sweeps.confirm",
        "sweeps.transfer",
        "sweeps.loss_fit",
        "sweeps.predict",
    }
)
#: What both wings stand on: the database, the trial record, the spec, text and the console.
FOUNDATION = frozenset(
    {
        "sweeps.storage",
        "sweeps.records",
        "sweeps.record",
        "sweeps.optuna_compat",
        "sweeps.liveness",
        "sweeps.childenv",
        "sweeps.spec",
        "sweeps.conditions",
        "sweeps.text",
        "sweeps.console",
        "sweeps.plain",
        "sweeps.sql",
        "sweeps.table",
    }
)
#: The entry points, above both wings.
ENTRY = frozenset({"sweeps.cli", "sweeps.__main__"})
MAX_FLOORS = 12


def room(module: str) -> str | None:
    """The room a module of ``sweeps`` lives in (None outside ``sweeps`` or for the package)."""
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) == 1:
        return None
    return f"{PACKAGE}.{parts[1]}"


def rooms() -> dict[str, set[str]]:
    """Each room of ``sweeps`` -> the rooms it stands on."""
    modules = _module_names()
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = room(name)
        if here is None:
            continue
        out.setdefault(here, set())
        for target in _imports(name, path, modules):
            there = room(target)
            if there is not None and there != here:
                out[here].add(there)
    return out


def _reach(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in graph[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def upward_arrows(graph: Mapping[str, set[str]]) -> list[str]:
    """``A -> B`` for each arrow whose target also reaches back to its source."""
    return sorted(f"{a} -> {b}" for a in graph for b in graph[a] if a in _reach(graph, b))


def floors(graph: Mapping[str, set[str]]) -> dict[str, int]:
    """Each room's floor (the graph must have no upward arrow)."""

    @functools.cache
    def floor(name: str) -> int:
        return 1 + max((floor(d) for d in graph[name]), default=0)

    return {name: floor(name) for name in graph}


def wing(name: str) -> str:
    if name in ENTRY:
        return "entry"
    if name in ANALYSIS_WING:
        return "analysis"
    if name in FOUNDATION:
        return "foundation"
    return "run"


#: What each wing may stand on: the wings stand side by side on the foundation, which stands on
#: itself alone; the entry points stand on anything.
MAY_STAND_ON = {
    "analysis": ("analysis", "foundation"),
    "run": ("run", "foundation"),
    "foundation": ("foundation",),
}


def wing_trespasses(graph: Mapping[str, set[str]]) -> list[str]:
    """Arrows from a wing to a room it may not stand on (``MAY_STAND_ON``)."""
    return sorted(
        f"{a} -> {b}"
        for a in graph
        if wing(a) in MAY_STAND_ON
        for b in graph[a]
        if wing(b) not in MAY_STAND_ON[wing(a)]
    )


_COLOURS = {"entry": "#d9ead3", "analysis": "#cfe2f3", "run": "#fce5cd", "foundation": "#eeeeee"}


def svg(graph: Mapping[str, set[str]]) -> str:
    """The building as an SVG: one row per floor (highest on top), a box per room coloured by
    wing, a line per arrow."""
    level = floors(graph)
    height = max(level.values())
    order = {"analysis": 0, "entry": 1, "foundation": 1, "run": 2}  # the wings side by side
    rows = {
        f: sorted((n for n in graph if level[n] == f), key=lambda n: (order[wing(n)], n))
        for f in range(1, height + 1)
    }
    box_w, box_h, gap_x, gap_y, margin = 118, 26, 10, 44, 70
    width = margin + max(len(r) for r in rows.values()) * (box_w + gap_x) + gap_x
    total_h = height * (box_h + gap_y) + gap_y
    place = {}
    for f, names in rows.items():
        y = gap_y + (height - f) * (box_h + gap_y)
        for i, name in enumerate(names):
            place[name] = (margin + gap_x + i * (box_w + gap_x), y)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{total_h}" fill="white"/>',
    ]
    for a in sorted(graph):
        ax, ay = place[a]
        for b in sorted(graph[a]):
            bx, by = place[b]
            out.append(
                f'<line x1="{ax + box_w / 2}" y1="{ay + box_h}" x2="{bx + box_w / 2}" y2="{by}" '
                'stroke="#999" stroke-opacity="0.35"/>'
            )
    for f in rows:
        y = gap_y + (height - f) * (box_h + gap_y)
        out.append(f'<text x="8" y="{y + 17}" fill="#555">floor {f}</text>')
    for name, (x, y) in sorted(place.items()):
        label = html.escape(name.removeprefix(f"{PACKAGE}."))
        out.append(
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="4" '
            f'fill="{_COLOURS[wing(name)]}" stroke="#666"/>'
            f'<text x="{x + box_w / 2}" y="{y + 17}" text-anchor="middle">{label}</text>'
        )
    for i, (name, colour) in enumerate(_COLOURS.items()):
        x = margin + gap_x + i * (box_w + gap_x)
        out.append(
            f'<rect x="{x}" y="4" width="{box_w}" height="16" fill="{colour}" stroke="#666"/>'
            f'<text x="{x + box_w / 2}" y="16" text-anchor="middle">{name}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, help="write the picture here")
    args = parser.parse_args()
    graph = rooms()
    up = upward_arrows(graph)
    if up:
        print("arrows running up:", *up, sep="\n  ")
        return
    level = floors(graph)
    for name in sorted(graph, key=lambda n: (-level[n], n)):
        print(f"{level[name]:3d} {wing(name):10s} {name} -> {', '.join(sorted(graph[name]))}")
    print(f"floors: {max(level.values())}; wing trespasses: {wing_trespasses(graph)}")
    if args.svg:
        args.svg.write_text(svg(graph), encoding="utf-8")


if __name__ == "__main__":
    main()
