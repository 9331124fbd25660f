"""A ``[space]`` with many categorical choices (issue 34, item 2): ``lr = [100,000 floats]`` kept
``sweeps run SPEC --dry-run`` busy for more than 10 minutes. Repeats were found by comparing each
choice with every one kept (9.0M calls of ``same`` at 3,000 choices), every choice was probed with
a config and a memory estimate, and the dry run printed them all (1,403 lines at 3,000).

No test here is timed (``tests/bench/bench_choices.py`` prints the times): each counts the work
instead, which must not grow with the number of choices."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import plan
from sweeps.spec import read_spec, values
from sweeps.spec.types import ParamSpec
from tests.sweeps.cli import sweeps_here
from tests.sweeps.helpers import spec_dict, toml_text


def _quadratic_unique(items: list[Any]) -> list[Any]:
    """The definition ``unique`` keeps: each value unless ``same`` as one kept before it."""
    out: list[Any] = []
    for v in items:
        if not any(values.same(v, o) for o in out):
            out.append(v)
    return out


SCALARS = hs.one_of(
    hs.booleans(),
    hs.integers(-3, 3),
    hs.sampled_from([0.0, -0.0, 1.0, 2.5, math.nan]),
    hs.none(),
    hs.sampled_from(["a", "b", "1"]),
)


@settings(max_examples=400, deadline=None)
@given(items=hs.lists(SCALARS, max_size=12))
def test_unique_and_repeated_keep_the_rule_of_same(items: list[Any]) -> None:
    """True is not 1, 1 is 1.0, NaN is the same as nothing: as ``same`` says, in linear time."""
    expected = _quadratic_unique(items)
    got = values.unique(items)
    assert len(got) == len(expected)
    assert all(a is b for a, b in zip(got, expected, strict=True))
    twice = values.repeated(items)
    assert (twice is None) == (len(expected) == len(items))
    if twice is not None:
        i, j = twice
        assert i < j and values.same(items[i], items[j])
        assert len(_quadratic_unique(items[:j])) == j  # the first repeat, not a later one


def _spec_data(corpus: Path, lrs: list[float]) -> dict[str, Any]:
    return spec_dict(
        "many", corpus, space={"lr": {"choices": lrs}}, study={"sampler": "random", "n_trials": 5}
    )


def _lrs(n: int) -> list[float]:
    return [1e-4 + i * 1e-9 for i in range(n)]


def _count(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _plan_everything(corpus: Path, n: int) -> None:
    """What ``run --dry-run`` and ``estimate`` do with a spec of ``n`` choices."""
    spec = read_spec(_spec_data(corpus, _lrs(n)))
    plan.dry_run(spec, "sqlite://", 1, None)
    plan.feasibility(spec, {}, None, 1, "subprocess", 50, 0)


def test_checking_choices_for_repeats_is_linear(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count(monkeypatch, values, "same")
    _plan_everything(corpus, 3000)
    assert calls[0] <= 3000  # was 9.0M: each choice against every one kept


def test_the_configs_built_do_not_grow_with_the_choices(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each probe builds a config (and the largest-point search a memory estimate): 3,000 and
    6,000 choices build as many, where every choice was a probe. (A grid of up to 2,048 points
    is searched whole for the largest point: a bound that does not grow either.)"""
    counts = []
    for n in (3000, 6000):
        built = _count(monkeypatch, TrainConfig, "__post_init__")
        _plan_everything(corpus, n)
        counts.append(built[0])
        monkeypatch.undo()
    assert counts[0] == counts[1] and counts[0] < 1000, counts


def test_a_long_list_is_probed_at_its_extremes() -> None:
    lrs = _lrs(1000)
    choices = (*lrs[:500], -1.0, 0.5, *lrs[500:])
    probes = ParamSpec("lr", "categorical", choices=choices).probe_values()
    assert probes[:2] == [-1.0, 0.5] and len(probes) == 2
    short = ParamSpec("d_model", "categorical", choices=(32, 100, 64)).probe_values()
    assert short == [32, 100, 64]  # a list a person types is probed whole
    mixed = ParamSpec("x", "categorical", choices=(*range(100), "a", True)).probe_values()
    assert mixed == [0, 99, "a", True]


def test_a_bad_extreme_of_a_long_list_is_refused(corpus: Path) -> None:
    lrs = _lrs(2000)
    lrs[1234] = -1.0
    with pytest.raises(SweepsError, match=r"space\.lr.*lr=-1"):
        read_spec(_spec_data(corpus, lrs))


def test_a_repeat_in_a_long_list_is_named_in_one_short_line(corpus: Path) -> None:
    lrs = _lrs(3000)
    lrs[2999] = lrs[17]
    with pytest.raises(SweepsError) as err:
        read_spec(_spec_data(corpus, lrs))
    message = str(err.value)
    assert "choices[17] and choices[2999]" in message and len(message) < 300, message


def test_the_dry_run_summarises_a_long_list(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    lines = []
    for n in (10, 3000):
        (tmp_path / "spec.toml").write_text(toml_text(_spec_data(corpus, _lrs(n))))
        proc = sweeps_here("run", "spec.toml", "--dry-run")
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        lines.append(len(out.splitlines()))
    flat = " ".join(out.split())  # the table wraps where the terminal says; words do not
    assert "lr categorical 0.0001, " in flat and "(3,000 choices)" in flat, out
    assert lines[1] <= lines[0] + 4, lines  # was 1,403 lines at 3,000 choices
    rows = dict((r[0], r[2]) for r in plan.space_rows(read_spec(_spec_data(corpus, _lrs(3000)))))
    assert rows["lr"].endswith("(3,000 choices)")
    assert len(rows["lr"].split(", ")) == values.SHOWN_VALUES + 2  # the first few, ..., the last
