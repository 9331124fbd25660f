"""Transfer studies (``[transfer]``, issue 37 item 3): the spec enqueues every parametrization x
width x learning rate x seed with heads scaled to keep ``d_head``; the optimum of a loss curve
and its bootstrap interval over seeds; the drift's verdict; the report's chart data."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from lm.errors import SweepsError
from sweeps import transfer as tr
from sweeps.space import distributions, trial_config
from sweeps.spec import Transfer, read_spec
from sweeps.spec.schema import spec_schema
from tests.sweeps.helpers import spec_dict

WIDTHS = [32, 64, 128]
LRS = [2.0**-k for k in (10, 9, 8, 7)]


def transfer_dict(name: str, corpus: Path, **transfer: Any) -> dict[str, Any]:
    """A ``[transfer]`` spec on TINY's settings (d_model 16, 2 heads: d_head 8), no [space]."""
    data = spec_dict(name, corpus, space={}, fixed={"tokenizer": "word", "vocab_size": 300})
    del data["space"]
    data["fixed"].pop("lr", None)
    for key in ("sampler", "pruner", "n_trials"):
        data["study"].pop(key)
    data["transfer"] = {"widths": WIDTHS, "lrs": LRS, **transfer}
    return data


# --- the spec ----------------------------------------------------------------------------------


def test_the_spec_enqueues_the_product_with_heads_scaled(corpus: Path) -> None:
    data = transfer_dict("tr", corpus, seeds=[0, 1])
    d_model, n_heads, d_ff = (data["fixed"][k] for k in ("d_model", "n_heads", "d_ff"))
    spec = read_spec(data)
    assert spec.transfer is not None and spec.design is spec.transfer
    assert spec.study.sampler.name == "random" and spec.study.pruner.name == "none"
    trials = spec.initial_trials()
    assert len(trials) == spec.study.n_trials == 2 * 3 * 4 * 2
    keys = {(t["parametrization"], t["d_model"], t["lr"], t["seed"]) for t in trials}
    assert len(keys) == len(trials)  # every combination once
    assert keys == {
        (p, w, lr, s) for p in ("sp", "mup") for w in WIDTHS for lr in LRS for s in (0, 1)
    }
    assert [t["seed"] for t in trials] == [0] * 24 + [1] * 24  # seed-major
    for point in trials:
        cfg = trial_config(spec, point)
        assert cfg.d_model // cfg.n_heads == d_model // n_heads  # d_head kept
        assert cfg.d_ff * d_model == d_ff * cfg.d_model  # d_ff / d_model kept
        assert cfg.base_width == WIDTHS[0]  # the narrowest width, by default
        assert cfg.parametrization == point["parametrization"] and cfg.lr == point["lr"]
    assert set(distributions(spec)) == set(spec.param_names)


def test_d_head_and_base_width_given_in_the_table(corpus: Path) -> None:
    spec = read_spec(
        transfer_dict("tr", corpus, d_head=16, base_width=64, parametrizations=["mup"])
    )
    assert spec.transfer is not None
    points = spec.initial_trials()
    assert len(points) == 12 and {p["parametrization"] for p in points} == {"mup"}
    assert {(p["d_model"], p["n_heads"]) for p in points} == {(32, 2), (64, 4), (128, 8)}
    assert {p["base_width"] for p in points} == {64}
    assert "seed" not in spec.param_names  # no seeds: the spec's own seed for every trial


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"widths": [32, 36]}, "transfer.widths[1]: 36 is not a multiple of d_head=8"),
        ({"widths": [64, 32]}, "transfer.widths: must increase"),
        ({"widths": [32]}, "transfer.widths: must list two or more"),
        ({"lrs": [1e-3, 2e-3]}, "transfer.lrs: must list three or more"),
        ({"lrs": [1e-3, -1.0, 2e-3]}, "transfer.lrs[1]: must be a finite learning rate > 0"),
        ({"lrs": [4e-3, 2e-3, 1e-3]}, "transfer.lrs: must increase"),
        ({"parametrizations": ["sp", "xp"]}, "transfer.parametrizations[1]: must be one of"),
        ({"parametrizations": ["sp", "sp"]}, "transfer.parametrizations: lists one twice"),
        ({"d_head": 12}, "transfer.widths[0]: 32 is not a multiple of d_head=12"),
        ({"seeds": [0, 0]}, "transfer.seeds: lists a seed twice"),
        ({"width": [32, 64]}, "transfer.width"),  # an unknown key: did you mean widths
        ({"fixed.lr": 0.01}, "fixed.lr: lr is set by transfer.lrs; remove it from [fixed]"),
        ({"fixed.parametrization": "mup"}, "fixed.parametrization: parametrization is set by"),
        (
            {"fixed.d_ff": 50, "fixed.d_model": 24, "fixed.n_heads": 3},
            "32 x d_ff / d_model (50 / 24",
        ),
        ({"study.pruner": "median"}, "study.pruner: pruner 'median' would stop transfer"),
        ({"study.n_trials": 100}, "study.n_trials: is 100, but the [transfer] grid has 24"),
        ({"space": {"dropout": [0.0, 0.1]}}, "[transfer] and [space] cannot be combined"),
    ],
)
def test_mistakes_are_one_line_errors(corpus: Path, change: dict[str, Any], expected: str) -> None:
    data = transfer_dict("tr", corpus)
    for key, value in change.items():
        if "." in key:
            table, field = key.split(".")
            data[table][field] = value
        elif key == "space":
            data["space"] = value
        else:
            data["transfer"][key] = value
    with pytest.raises(SweepsError) as err:
        read_spec(data)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_the_type_checks_itself_and_the_schema_names_its_keys() -> None:
    with pytest.raises(SweepsError, match="widths"):
        Transfer(widths=(32,), lrs=(1e-3, 2e-3, 4e-3))
    t = Transfer(widths=(32, 64), lrs=(1e-3, 2e-3, 4e-3), seeds=(0,))
    assert t.base == 32 and t.head_width == 32  # TrainConfig's defaults: 128 / 4
    assert set(spec_schema()["properties"]["transfer"]["properties"]) == {
        "widths",
        "lrs",
        "parametrizations",
        "seeds",
        "d_head",
        "base_width",
    }


def test_the_shipped_transfer_study_reads_and_spans_the_widths() -> None:
    from sweeps.spec import load_spec

    spec = load_spec(Path(__file__).parents[2] / "studies" / "transfer.toml", check_paths=False)
    assert spec.transfer is not None
    assert spec.transfer.widths[0] == 32 and spec.transfer.widths[-1] >= 256
    assert set(spec.transfer.parametrizations) == {"sp", "mup"}
    assert spec.transfer.seeds is not None and len(spec.transfer.seeds) >= 2
    steps = np.diff(np.log2(spec.transfer.lrs))
    assert np.allclose(steps, 1.0)  # octaves


# --- the fit -----------------------------------------------------------------------------------


def parabola_trials(
    optima: dict[tuple[str, int], float],
    *,
    seeds: int = 6,
    noise: float = 0.01,
    lrs: np.ndarray | None = None,
    diverge_above: float = math.inf,
    seed: int = 0,
) -> pd.DataFrame:
    """Trials whose loss is a parabola in log2 lr around each curve's optimum (log2), with seed
    noise; a rate more than ``diverge_above`` octaves above the optimum diverges."""
    rng = np.random.default_rng(seed)
    grid = 2.0 ** np.arange(-12, -4) if lrs is None else lrs
    rows = []
    for (p, width), opt in optima.items():
        for lr in grid:
            for s in range(seeds):
                x = math.log2(lr) - opt
                diverged = x > diverge_above
                rows.append(
                    {
                        "parametrization": p,
                        "d_model": width,
                        "lr": lr,
                        "seed": s,
                        "outcome": "diverged" if diverged else "complete",
                        "val_bpb": 9.0 if diverged else 2 + 0.05 * x**2 + rng.normal(0, noise),
                    }
                )
    return pd.DataFrame(rows)


def test_the_fit_finds_a_known_optimum_and_its_interval_covers_it() -> None:
    found = tr.curves(parabola_trials({("sp", 32): -8.3, ("sp", 64): -9.6}), resamples=500)
    assert [(c.parametrization, c.width) for c in found] == [("sp", 32), ("sp", 64)]
    for c, truth in zip(found, (-8.3, -9.6), strict=True):
        assert c.lr_opt is not None and c.interval is not None and c.note is None
        assert abs(math.log2(c.lr_opt) - truth) < 0.25
        assert c.interval[0] <= 2.0**truth <= c.interval[1]
        assert c.complete == c.trials == 8 * 6 and c.diverged == 0


def test_more_seed_noise_gives_a_wider_interval() -> None:
    def width(noise: float) -> float:
        [c] = tr.curves(parabola_trials({("sp", 32): -8.3}, noise=noise), resamples=500)
        assert c.interval is not None
        return math.log2(c.interval[1] / c.interval[0])

    assert width(0.03) > width(0.003)


def test_a_diverged_rate_is_worse_than_any_loss_and_counted() -> None:
    # The optimum sits one octave below rates that diverge: bracketed by them, not beyond.
    trials = parabola_trials({("sp", 32): -6.0}, diverge_above=0.5, seeds=3)
    [c] = tr.curves(trials, resamples=200)
    assert c.diverged == 3 * 1 and c.complete == 3 * 7  # 2^-5 diverged
    assert c.lr_opt == pytest.approx(2.0**-6, rel=0.2) and not c.unbracketed
    assert math.isinf(c.means[-1])


def test_an_optimum_at_the_grids_edge_is_unbracketed() -> None:
    [c] = tr.curves(parabola_trials({("mup", 32): -3.0}, seeds=3), resamples=200)
    assert c.unbracketed and c.lr_opt == 2.0**-5 and "edge" in (c.note or "")


def test_one_seed_gives_an_optimum_without_an_interval() -> None:
    [c] = tr.curves(parabola_trials({("sp", 32): -8.0}, seeds=1))
    assert c.lr_opt is not None and c.interval is None and "seed" in (c.note or "")


def test_the_fit_is_seeded() -> None:
    trials = parabola_trials({("sp", 32): -8.3, ("sp", 64): -9.0}, seeds=3, noise=0.03)
    a = tr.fit_transfer(trials, resamples=300, seed=1)
    b = tr.fit_transfer(trials, resamples=300, seed=1)
    assert a.to_dict() == b.to_dict()


# --- the drift ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        ((-0.5, 0.8), tr.TRANSFERS),
        ((-1.0, 1.0), tr.TRANSFERS),
        ((1.2, 3.0), tr.DOES_NOT),
        ((-4.0, -1.5), tr.DOES_NOT),
        ((-0.5, 1.5), tr.CANNOT_TELL),
        ((-3.0, 3.0), tr.CANNOT_TELL),
        (None, tr.CANNOT_TELL),
    ],
)
def test_the_verdict_rule(interval: tuple[float, float] | None, expected: str) -> None:
    assert tr.verdict(interval) == expected


def test_drift_verdicts_of_sp_and_mup() -> None:
    optima = {("sp", w): -7.0 - 0.8 * i for i, w in enumerate((32, 64, 128, 256))}
    optima |= {("mup", w): -7.5 for w in (32, 64, 128, 256)}
    fit = tr.fit_transfer(parabola_trials(optima, seeds=4), resamples=300)
    sp, mup = fit.drifts
    assert (sp.parametrization, sp.narrow, sp.wide) == ("sp", 32, 256)
    assert sp.verdict == tr.DOES_NOT and sp.octaves == pytest.approx(-2.4, abs=0.3)
    assert mup.verdict == tr.TRANSFERS and abs(mup.octaves or 9) < 0.3
    assert sp.interval is not None and sp.interval[0] <= sp.octaves <= sp.interval[1]


def test_too_much_noise_cannot_tell() -> None:
    optima = {("sp", 32): -8.0, ("sp", 256): -9.0}
    fit = tr.fit_transfer(parabola_trials(optima, seeds=2, noise=0.2, seed=3), resamples=300)
    [d] = fit.drifts
    assert d.verdict == tr.CANNOT_TELL and d.interval is not None
    assert d.interval[1] - d.interval[0] > 1


def test_an_unbracketed_end_cannot_tell() -> None:
    fit = tr.fit_transfer(
        parabola_trials({("sp", 32): -8.0, ("sp", 64): -3.0}, seeds=3), resamples=200
    )
    [d] = fit.drifts
    assert d.verdict == tr.CANNOT_TELL and "edge" in d.why and "64" in d.why


def test_failed_and_pending_trials_are_counted_not_fitted() -> None:
    trials = parabola_trials({("sp", 32): -8.0, ("sp", 64): -8.0}, seeds=3)
    trials.loc[0, "outcome"] = "oom"
    trials.loc[1, "outcome"] = "waiting"
    trials.loc[2, "outcome"] = "interrupted"  # stopped from outside: not counted at all
    c = tr.curves(trials, resamples=100)[0]
    assert (c.trials, c.complete, c.failed, c.pending) == (23, 21, 1, 1)


# --- the chart ----------------------------------------------------------------------------------


def _results(trials: pd.DataFrame, spec: dict[str, Any] | None) -> Any:
    from sweeps import results

    return results.StudyResults(
        name="t",
        storage="x",
        directions=["minimize"],
        objectives=["val_bpb"],
        user_attrs={"spec": spec} if spec else {},
        trials=trials,
        evals=pd.DataFrame(),
        samples=pd.DataFrame(),
    )


def test_the_chart_draws_sp_beside_mup_and_states_the_drift() -> None:
    from sweeps.charts import transfer as chart

    optima = {("sp", 32): -7.0, ("sp", 128): -8.6, ("mup", 32): -7.0, ("mup", 128): -7.1}
    trials = parabola_trials(optima, seeds=3, diverge_above=2.5)
    data = _results(trials, {"transfer": {"widths": [32, 128]}})
    assert chart.applies(data) and not chart.applies(_results(trials, None))
    fit = chart.data(data)
    assert [(c.parametrization, c.width) for c in fit.curves] == [
        ("sp", 32),
        ("sp", 128),
        ("mup", 32),
        ("mup", 128),
    ]
    drawn = chart.chart(data)
    assert drawn.figure is not None and drawn.key == "transfer"
    titles = [a.text for a in drawn.figure.layout.annotations]
    assert [t.split(":")[0] for t in titles] == ["sp", "mup"]  # two panels
    assert titles[0].startswith("sp: does not transfer, -") and "from 32 to 128" in titles[0]
    assert chart.lr_label(2.0**-7) == "2<sup>-7</sup>" and chart.lr_label(0.003) == "0.003"
    assert drawn.figure.layout.xaxis.type == "log"
    stars = [t for t in drawn.figure.data if t.marker.symbol == "star"]
    assert len(stars) == 4 and all(t.error_x.array is not None for t in stars)
    assert any(t.marker.symbol == "x" for t in drawn.figure.data)  # the diverged rates
    assert "sp: does not transfer" in drawn.about and "mup: transfers" in drawn.about


def test_the_report_has_a_transfer_section_for_a_transfer_study_only() -> None:
    from sweeps import report
    from sweeps.charts import transfer as chart

    assert chart.chart in report.CHARTS and report.APPLIES[chart.chart] is chart.applies
    assert report.CHART_NAMES[chart.chart][0] == "transfer"


def test_spec_round_trips(corpus: Path) -> None:
    spec = read_spec(transfer_dict("tr", corpus, seeds=[0]))
    again = read_spec(copy.deepcopy(spec.to_dict()))
    assert again.transfer == spec.transfer and again.initial_trials() == spec.initial_trials()
