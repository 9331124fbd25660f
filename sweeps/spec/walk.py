"""Conditional spaces: the order parameters are suggested in, and the one walk over them that
honours ``when`` conditions (suggesting a trial, enumerating a grid, drawing a sample, carrying
an old trial into a new space, checking an enqueued config all walk the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lm.errors import FieldError

if TYPE_CHECKING:
    from sweeps.spec.types import ParamSpec


def order(params: list[ParamSpec]) -> tuple[ParamSpec, ...]:
    """Suggestion order: a parameter after every searched field its condition reads."""
    by_name = {p.name: p for p in params}
    deps = {p.name: (p.when.fields & by_name.keys()) if p.when else set() for p in params}
    done: list[ParamSpec] = []
    placed: set[str] = set()
    while len(done) < len(params):
        ready = [p for p in params if p.name not in placed and deps[p.name] <= placed]
        if not ready:
            stuck = [p.name for p in params if p.name not in placed]
            raise FieldError(
                f"space.{stuck[0]}.when",
                f"conditions form a cycle among {', '.join(stuck)}; make one of them unconditional",
            )
        done.append(ready[0])
        placed.add(ready[0].name)
    return tuple(done)


def walk_space(
    params: Iterable[ParamSpec],
    base: Mapping[str, Any],
    values: Callable[[ParamSpec], Iterable[Any]],
) -> Iterator[dict[str, Any]]:
    """Every point whose values come from ``values(p)``, conditions respected: a parameter whose
    condition does not hold (given ``base`` and the values chosen before it) is left out of that
    point, and ``values`` is not asked for it. ``params`` must be in suggestion order
    (``StudySpec.space`` is). ``values`` returning one value walks one path (a trial's draw);
    returning several branches on each (a grid); returning none ends that branch."""
    params = list(params)

    def walk(i: int, env: dict[str, Any], point: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(params):
            yield dict(point)
            return
        p = params[i]
        if p.when is not None and not p.when.holds(env):
            yield from walk(i + 1, env, point)
            return
        for value in values(p):
            env[p.name] = point[p.name] = value
            yield from walk(i + 1, env, point)
        env[p.name] = base.get(p.name)
        point.pop(p.name, None)

    yield from walk(0, dict(base), {})


def walk_one(
    params: Iterable[ParamSpec], base: Mapping[str, Any], value: Callable[[ParamSpec], Any]
) -> dict[str, Any]:
    """The one point whose values are ``value(p)``, for each parameter whose condition holds."""
    return next(walk_space(params, base, lambda p: (value(p),)))


def iter_grid(params: Iterable[ParamSpec], base: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every point of a finite space, conditions respected, so no point repeats."""
    return walk_space(params, base, lambda p: p.values())
