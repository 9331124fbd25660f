"""The import graph's shape (see ``tests/structure.py`` for rooms, floors and wings): no arrow
running up, at most ``MAX_FLOORS`` floors, the analysis wing on the foundation alone, and the
picture in ``docs/import-graph.svg`` drawn from the code as it is."""

from __future__ import annotations

from pathlib import Path

from tests import structure

PICTURE = Path(__file__).resolve().parents[1] / "docs" / "import-graph.svg"


def test_no_arrow_runs_up() -> None:
    assert structure.upward_arrows(structure.rooms()) == []


def test_the_building_has_at_most_twelve_floors() -> None:
    level = structure.floors(structure.rooms())
    assert max(level.values()) <= structure.MAX_FLOORS, sorted(level.items(), key=lambda x: -x[1])


def test_the_wings_stand_side_by_side_on_the_foundation() -> None:
    assert structure.wing_trespasses(structure.rooms()) == []


def test_the_checks_find_what_they_look_for() -> None:
    graph = {"sweeps.a": {"sweeps.b"}, "sweeps.b": {"sweeps.c"}, "sweeps.c": {"sweeps.a"}}
    assert structure.upward_arrows(graph) == [
        "sweeps.a -> sweeps.b",
        "sweeps.b -> sweeps.c",
        "sweeps.c -> sweeps.a",
    ]
    tower = {"sweeps.results": {"sweeps.study"}, "sweeps.study": set()}
    assert structure.floors(tower) == {"sweeps.results": 2, "sweeps.study": 1}
    assert structure.wing_trespasses(tower) == ["sweeps.results -> sweeps.study"]
    below = {"sweeps.storage": {"sweeps.runner"}, "sweeps.runner": {"sweeps.effects"}}
    below |= {"sweeps.effects": set()}
    assert structure.wing_trespasses(below) == [
        "sweeps.runner -> sweeps.effects",
        "sweeps.storage -> sweeps.runner",
    ]


def test_the_picture_is_drawn_from_the_code() -> None:
    """Regenerate with ``python -m tests.structure --svg docs/import-graph.svg``."""
    assert PICTURE.read_text(encoding="utf-8") == structure.svg(structure.rooms())
