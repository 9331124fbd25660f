"""The learning-rate schedules (``lm.schedule``): pure arithmetic, no training."""

from __future__ import annotations

import math
from typing import Any

import pytest

from lm.config import TrainConfig
from lm.schedule import (
    MIN_LR_FRACTION,
    cooldown_lr,
    cooldown_tokens,
    decay_factor,
    decay_tokens,
    lr_at,
    lr_sum,
)

#: 100 tokens per step (batch 1 x seq_len 100).
BASE: dict[str, Any] = {
    "corpus": "data/c",
    "tokenizer": "byte",
    "vocab_size": 260,
    "seq_len": 100,
    "batch_size": 1,
    "lr": 1.0,
    "warmup_tokens": 1_000,
    "max_tokens": 10_000,
}


def make(**overrides: Any) -> TrainConfig:
    return TrainConfig.from_dict({**BASE, **overrides})


def test_cosine_warms_up_then_falls_to_its_floor() -> None:
    cfg = make()
    assert lr_at(0, cfg) == pytest.approx(100 / 1_100)
    assert lr_at(1_000, cfg) == 1.0
    assert lr_at(5_500, cfg) == pytest.approx(MIN_LR_FRACTION + 0.5 * (1 - MIN_LR_FRACTION))
    assert lr_at(10_000, cfg) == pytest.approx(MIN_LR_FRACTION)


@pytest.mark.parametrize(("shape", "halfway"), [("linear", 0.5), ("1-sqrt", 1 - math.sqrt(0.5))])
def test_wsd_holds_the_rate_then_decays_to_zero_over_the_last_fraction(
    shape: str, halfway: float
) -> None:
    cfg = make(lr_schedule="wsd", decay_fraction=0.2, decay_shape=shape)
    assert decay_tokens(cfg) == 2_000
    assert lr_at(500, cfg) == lr_at(500, make())  # the same warm-up as cosine
    assert lr_at(1_000, cfg) == lr_at(7_999, cfg) == lr_at(8_000, cfg) == 1.0
    assert lr_at(9_000, cfg) == pytest.approx(halfway)
    assert lr_at(10_000, cfg) == 0.0
    assert lr_at(8_100, cfg) > lr_at(8_200, cfg) > lr_at(9_900, cfg) > 0


def test_one_minus_sqrt_falls_faster_first() -> None:
    assert decay_factor(10, 0, 100, "1-sqrt") < decay_factor(10, 0, 100, "linear")
    assert decay_factor(-1, 0, 100, "1-sqrt") == 1.0 == decay_factor(5, 0, 0, "linear")


def test_a_cooldown_read_has_the_rates_of_a_wsd_run_that_ends_after_it() -> None:
    """The definition ``lm.cooldown`` relies on: a read at p over c tokens has, step for step,
    the rates of a WSD run of p + c tokens whose decay is its last c."""
    reading = make(lr_schedule="wsd", max_tokens=20_000, cooldown_fraction=0.25)
    p = 8_000
    c = cooldown_tokens(reading, p)
    assert c == 2_000
    full = make(lr_schedule="wsd", max_tokens=p + c, decay_fraction=c / (p + c))
    assert decay_tokens(full) == c
    for t in range(p, p + c, reading.tokens_per_step):
        assert cooldown_lr(t, p, c, reading) == lr_at(t, full)
    assert lr_at(p, reading) == 1.0  # the reading run itself is still stable there


def test_a_read_inside_the_warm_up_keeps_warming_while_it_decays() -> None:
    cfg = make(lr_schedule="wsd", cooldown_fraction=1.0)
    assert cooldown_lr(400, 400, 400, cfg) == lr_at(400, cfg)
    assert cooldown_lr(600, 400, 400, cfg) == pytest.approx(lr_at(600, cfg) * (1 - math.sqrt(0.5)))


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_lr_sum_adds_the_rate_of_every_step_taken(schedule: str) -> None:
    """The sum the verdicts wait for: one term per optimizer step that starts before ``tokens``
    (100 tokens per step here), each the rate that step trains at."""
    cfg = make(lr_schedule=schedule)
    assert lr_sum(0, cfg) == 0.0
    assert lr_sum(100, cfg) == lr_at(0, cfg)
    assert lr_sum(150, cfg) == lr_at(0, cfg) + lr_at(100, cfg)  # a step started before 150
    whole = lr_sum(10_000, cfg)
    assert whole == pytest.approx(sum(lr_at(t, cfg) for t in range(0, 10_000, 100)))
    assert 0.1 * 100 < whole < 100  # under lr 1.0 for each of the 100 steps, over the floor
    # It stops as soon as the sum reaches the bound asked for: within one step of it.
    bounded = lr_sum(10_000, cfg, stop_at=5.0)
    assert 5.0 <= bounded < 5.0 + 1.0
