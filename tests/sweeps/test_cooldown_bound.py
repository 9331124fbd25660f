"""A cooldown read's decay is bounded (issue 34, item 3): ``pruner = {name =
"successive_halving", read = "cooldown", cooldown_fraction = 1e9}`` was accepted, a read at
10,000 tokens decayed over about 1e13 tokens, and the trial ended only through ``max_wall_s``.
``lm.config.MAX_COOLDOWN_FRACTION`` (1: a read costs at most the tokens before it) holds in
``TrainConfig`` and ``PrunerSpec`` however they are built, and the dry run states each read's
token cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lm import flops, schedule
from lm.config import MAX_COOLDOWN_FRACTION, TrainConfig
from lm.errors import SweepsError
from sweeps import plan
from sweeps.space import trial_config
from sweeps.spec import PrunerSpec, read_spec
from tests.sweeps.cli import sweeps_here
from tests.sweeps.helpers import spec_dict

WSD = {"corpus": "c", "lr_schedule": "wsd", "max_tokens": 20_000, "cooldown_reads": [2_000]}


def _refused(build: Any, *needles: str) -> str:
    with pytest.raises(SweepsError) as err:
        build()
    message = str(err.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


@pytest.mark.parametrize("fraction", [1e9, 1.5])
def test_a_config_refuses_a_read_longer_than_the_run_before_it(fraction: float) -> None:
    for build in (
        lambda: TrainConfig(**{**WSD, "cooldown_fraction": fraction}),
        lambda: TrainConfig.from_dict({**WSD, "cooldown_fraction": fraction}),
    ):
        _refused(build, "cooldown_fraction", f"<= {MAX_COOLDOWN_FRACTION:g}", "use e.g. 0.25")
    assert TrainConfig(**{**WSD, "cooldown_fraction": 1.0}).read_cooldown_fraction == 1.0


def test_a_decay_fraction_that_makes_reads_too_long_is_named() -> None:
    # cooldown_fraction follows decay_fraction (d / (1 - d) = 4 at 0.8) when it is left out.
    _refused(
        lambda: TrainConfig.from_dict({**WSD, "decay_fraction": 0.8}),
        "decay_fraction",
        "set cooldown_fraction",
        "decay_fraction <= 0.5",
    )
    assert TrainConfig.from_dict({**WSD, "cooldown_reads": [], "decay_fraction": 0.8})
    assert TrainConfig.from_dict({**WSD, "decay_fraction": 0.8, "cooldown_fraction": 0.25})


def _spec(corpus: Path, pruner: dict[str, Any] | None = None, **fixed: Any) -> dict[str, Any]:
    return spec_dict(
        "reads",
        corpus,
        space={"d_ff": {"choices": [32, 64]}},
        fixed={"lr_schedule": "wsd", "eval_every_tokens": 500, **fixed},
        study={
            "pruner": {
                "name": "successive_halving",
                "read": "cooldown",
                "min_tokens": 500,
                **(pruner or {}),
            }
        },
    )


def test_the_pruner_refuses_it_however_it_is_built(corpus: Path) -> None:
    _refused(
        lambda: PrunerSpec("successive_halving", read="cooldown", cooldown_fraction=1e9),
        "cooldown_fraction",
        "must be <= 1",
    )
    _refused(
        lambda: read_spec(_spec(corpus, {"cooldown_fraction": 1e9})),
        "study.pruner.cooldown_fraction: must be <= 1",
        "use e.g. 0.25",
    )
    _refused(
        lambda: read_spec(_spec(corpus, decay_fraction=0.8)),
        "study.pruner.cooldown_fraction: is missing",
        "decay_fraction <= 0.5",
    )
    assert read_spec(_spec(corpus, {"cooldown_fraction": 1.0}))


def test_the_command_line_refuses_it() -> None:
    proc = sweeps_here(
        "estimate",
        "--lr-schedule",
        "wsd",
        "--max-tokens",
        "20000",
        "--cooldown-reads",
        "2000",
        "--cooldown-fraction",
        "1e9",
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cooldown_fraction must be <= 1" in proc.stderr, proc.stderr


def test_the_dry_run_states_each_reads_cost(corpus: Path) -> None:
    spec = read_spec(_spec(corpus, {"min_tokens": 1000}, max_tokens=3500))
    cfg = trial_config(spec, {"d_ff": 64})
    reads = schedule.read_points(cfg)
    assert len(reads) >= 2
    rows = dict(plan.dry_run(spec, "sqlite://", 1, None).rows)
    text = str(rows["cooldown reads"])
    for p in reads:
        assert f"at {p:,}: {schedule.branch_tokens(cfg, p):,}" in text, text
    total = flops.planned_reads(cfg)[1]
    assert f"{total:,} read tokens" in text and f"run's {flops.planned_tokens(cfg):,}" in text
    # The rung at 3,000 of 3,500 tokens: its branch (750) is longer than the 500 left.
    assert "finishing the run costs less than that read" in text, text
    plain = read_spec(spec_dict("plain", corpus, space={"d_ff": {"choices": [32, 64]}}))
    assert "cooldown reads" not in dict(plan.dry_run(plain, "sqlite://", 1, None).rows)
