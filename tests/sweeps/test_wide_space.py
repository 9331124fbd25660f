"""``[space]`` ranges of any width (issue 24, item 4): ``seed`` 0 to 4294967295 made ``run
--dry-run`` and ``estimate SPEC`` fail with a MemoryError traceback, because a range's values
were materialised as a list. A range is now a lazy sequence: its length, items and draws cost
nothing whatever its width, and a grid too wide to enumerate is a one-line error."""

from __future__ import annotations

import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from lm.errors import SweepsError
from sweeps.plan import _draw
from sweeps.space import grid_points, grid_search_space
from sweeps.spec import read_spec
from sweeps.spec.types import ParamSpec
from tests.shared import shared_corpus
from tests.sweeps.helpers import spec_dict, toml_text

WIDE = 2**62


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    low=hs.integers(min_value=-WIDE, max_value=WIDE),
    width=hs.integers(min_value=0, max_value=WIDE),
    step=hs.integers(min_value=1, max_value=7),
    seed=hs.integers(min_value=0, max_value=2**32),
)
def test_an_int_range_of_any_width_is_a_lazy_sequence(
    low: int, width: int, step: int, seed: int
) -> None:
    high = low + width - width % step  # step divides high - low
    p = ParamSpec("seed", "int", low=low, high=high, step=step)
    values = p.values()
    assert len(values) == width // step + 1
    assert values[0] == low and values[-1] == high
    drawn = _draw(p, random.Random(seed))
    assert low <= drawn <= high and (drawn - low) % step == 0


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=hs.integers(min_value=1, max_value=10**15),
    step=hs.sampled_from([0.5, 0.25, 1e-3]),
    seed=hs.integers(min_value=0, max_value=2**32),
)
def test_a_float_grid_of_any_width_is_a_lazy_sequence(n: int, step: float, seed: int) -> None:
    high = n * step
    try:
        p = ParamSpec("lr", "float", low=0.0, high=high, step=step)
    except SweepsError:
        return  # a step that does not divide the float span: the spec's own one-line error
    values = p.values()
    assert len(values) == n + 1 and values[0] == 0.0
    assert values[-1] == pytest.approx(high) and values[n // 2] == round(n // 2 * step, 12)
    assert 0.0 <= _draw(p, random.Random(seed)) <= high


def test_a_grid_over_a_wide_range_is_a_one_line_error(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    spec = read_spec(
        spec_dict(
            "wide",
            shared_corpus(tmp_path_factory),
            space={"seed": {"type": "int", "low": 0, "high": 4294967295}},
        )
    )
    with pytest.raises(SweepsError, match="more than"):
        grid_search_space(spec)
    with pytest.raises(SweepsError, match="more than"):
        grid_points(spec, limit=1000)


def _limit_memory() -> None:
    # A list of 2**32 ints would need ~150 GiB: under 3 GiB of address space the old code fails
    # at once, whatever the machine, instead of swapping.
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["estimate"]])
def test_the_dry_run_and_estimate_take_a_32_bit_seed_range(
    command: list[str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = spec_dict(
        "wide",
        shared_corpus(tmp_path_factory),
        space={"seed": {"type": "int", "low": 0, "high": 4294967295}},
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(toml_text(data), encoding="utf-8")
    args = [command[0], str(spec), *command[1:]]
    if command[0] == "run":
        args += ["--storage", f"sqlite:///{tmp_path / 'db.sqlite'}"]
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        preexec_fn=_limit_memory,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
