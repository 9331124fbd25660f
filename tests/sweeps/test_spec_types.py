"""Spec types built directly (not through the TOML reader) refuse bad values themselves, naming
the field and the value, and normalise what the reader would (sizes, lists, condition text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lm.errors import FieldError, SweepsError
from sweeps.spec import (
    Ablation,
    CollapseLimits,
    CorpusSpec,
    DivergenceLimits,
    Limits,
    Objective,
    ParamSpec,
    PrunerSpec,
    SamplerSpec,
    StudySection,
    StudySpec,
    parse_bytes,
)


def study(**overrides: Any) -> StudySection:
    values: dict[str, Any] = {
        "name": "t",
        "storage": None,
        "objectives": (Objective("val_bpb", "minimize"),),
        "sampler": SamplerSpec("tpe"),
        "seed": 0,
        "pruner": PrunerSpec("median"),
        "n_trials": 3,
        "timeout": None,
    }
    return StudySection(**{**values, **overrides})


@pytest.mark.parametrize(
    ("build", "field", "texts"),
    [
        (lambda: Limits(max_retries=-1), "max_retries", ["max_retries=-1", ">= 0"]),
        (lambda: Limits(memory_budget="8 gigs"), "memory_budget", ["'8 gigs'"]),
        (lambda: Limits(oom_policy="shrink"), "oom_policy", ["'shrink'", "fit"]),
        (lambda: Limits(collapse=3), "collapse", ["collapse=3"]),
        (lambda: CollapseLimits(min_steps=0), "min_steps", [">= 1"]),
        (lambda: CollapseLimits(max_unk_argmax=1.5), "max_unk_argmax", ["<= 1.0"]),
        (lambda: CollapseLimits(patience=0), "patience", ["patience=0"]),
        (lambda: DivergenceLimits(ratio=1.0), "ratio", ["must be > 1", "ratio=1.0"]),
        (lambda: SamplerSpec("tpes"), "name", ["'tpes'", "did you mean 'tpe'"]),
        (lambda: SamplerSpec("nsga2", population_size=1), "population_size", ["population_size=1"]),
        (lambda: PrunerSpec("hyperband", reduction_factor=1), "reduction_factor", [">= 2"]),
        (lambda: PrunerSpec("hyperband", min_tokens=0), "min_tokens", ["min_tokens=0"]),
        (lambda: PrunerSpec("median", min_tokens=1000), "min_tokens", ["not to pruner 'median'"]),
        (lambda: PrunerSpec("successive_halving", n_brackets=2), "n_brackets", ["hyperband only"]),
        (lambda: Objective("accuracy", "minimize"), "metric", ["'accuracy'"]),
        (lambda: study(name="a/b"), "name", ["'a/b'"]),
        (lambda: study(storage="sweeps.db"), "storage", ["sqlite:///"]),
        (lambda: study(n_trials=0), "n_trials", ["n_trials=0"]),
        (
            lambda: study(
                objectives=(Objective("val_bpb", "minimize"), Objective("val_bpb", "maximize"))
            ),
            "objectives[1]",
            ["twice"],
        ),
        (
            lambda: study(
                objectives=(Objective("val_bpb", "minimize"), Objective("peak_mem", "minimize"))
            ),
            "pruner",
            ["'median' needs a single objective", "successive_halving"],
        ),
        (lambda: ParamSpec("d_ff", "int", low=512, high=64), "low", ["low=512", "high=64"]),
        (lambda: ParamSpec("d_ff", "int", low=64.5, high=128), "low", ["low=64.5"]),
        (lambda: ParamSpec("lr", "float", low=0.0, high=1.0, log=True), "low", ["log"]),
        (lambda: ParamSpec("d_ff", "int", low=64, high=250, step=64), "step", ["divide"]),
        (lambda: ParamSpec("d_ff", "categorical", choices=[1, 1]), "choices", ["twice"]),
        (lambda: ParamSpec("d_ff", "categorical", choices=[1], low=0), "low", ["categorical"]),
        (lambda: ParamSpec("d_ff", "categorical", choices=[[1]]), "choices[0]", ["[1]"]),
        (
            lambda: ParamSpec("lowercase", "categorical", choices=[True], when="lowercase"),
            "when",
            ["itself"],
        ),
        (
            lambda: ParamSpec("lowercase", "categorical", choices=[True], when="tokenizer = 'x'"),
            "when",
            ["syntax"],
        ),
        (lambda: CorpusSpec(Path("c"), source=("a", "b")), "source", ["format posts", "2 paths"]),
        (lambda: CorpusSpec(Path("c"), format="text"), "format", ["only applies with source"]),
        (lambda: CorpusSpec(Path("c"), synthetic_size="lots"), "synthetic_size", ["'lots'"]),
        (lambda: CorpusSpec(Path("c"), val_fraction=1.0), "val_fraction", ["val_fraction=1.0"]),
        (lambda: Ablation({}, ()), "vary", ["empty"]),
        (lambda: Ablation({"corpus": "x"}, (("d_ff", (1,)),)), "baseline.corpus", ["[corpus]"]),
        (lambda: Ablation({}, (("d_ff", ()),)), "vary.d_ff", ["non-empty"]),
        (lambda: Ablation({}, (("d_ff", (1,)),), seeds=(0, 0)), "seeds", ["twice"]),
        (lambda: Ablation({}, (("d_ff", (1,)),), seeds=(0, -1)), "seeds[1]", ["seeds[1]=-1"]),
        (
            lambda: Ablation({"seed": 1}, (("d_ff", (1,)),), seeds=(0,)),
            "baseline.seed",
            ["ablation.seeds"],
        ),
    ],
)
def test_types_check_their_own_rules(build: Any, field: str, texts: list[str]) -> None:
    with pytest.raises(FieldError) as err:
        build()
    assert err.value.field == field
    assert str(err.value).startswith(f"{field} ")
    for text in texts:
        assert text in str(err.value), f"{text!r} not in {str(err.value)!r}"


def test_types_normalise_what_the_reader_would() -> None:
    assert Limits(memory_budget="2GiB").memory_budget == 2 * 2**30
    assert Limits(memory_budget=None).memory_budget is None
    assert Limits(collapse=False).collapse == CollapseLimits(enabled=False)
    assert Limits(divergence=True).divergence == DivergenceLimits()
    p = ParamSpec("lowercase", "categorical", choices=[False, True], when="tokenizer == 'word'")
    assert p.choices == (False, True) and p.when.holds({"tokenizer": "word"})
    assert ParamSpec("lr", "float", low=1, high=2).low == 1.0
    corpus = CorpusSpec("c", source="Posts.xml", synthetic_seed=0)
    assert corpus.dir == Path("c") and corpus.source == ("Posts.xml",)
    assert corpus.format == "posts" and corpus.needs_prepare
    assert CorpusSpec(Path("c"), synthetic_size="1KiB").synthetic_size == 1024


def test_study_spec_checks_rules_between_sections(tmp_path: Path) -> None:
    parts: dict[str, Any] = {
        "study": study(),
        "corpus": CorpusSpec(tmp_path),
        "fixed": {},
        "limits": Limits(),
    }
    d_ff = ParamSpec("d_ff", "categorical", choices=(64, 128))
    assert StudySpec(**parts, space=(d_ff,)).param("d_ff") is d_ff
    ablation = Ablation({}, (("d_ff", (1,)),))
    cases = [
        ({"space": (d_ff,), "ablation": ablation}, "ablation", "[space]"),
        ({"space": ()}, "space", "nothing to search"),
        ({"space": (d_ff,), "fixed": {"d_ff": 64}}, "space.d_ff", "[fixed]"),
        ({"space": (d_ff,), "fixed": {"corpus": "x"}}, "fixed.corpus", "[corpus]"),
        (
            {
                "space": (ParamSpec("lr", "float", low=0.1, high=1.0),),
                "study": study(sampler=SamplerSpec("grid")),
            },
            "space.lr",
            "step",
        ),
        ({"space": (), "ablation": ablation}, "study.sampler", "never be used"),
        (
            {"space": (d_ff,), "fixed": {"max_wall_s": 5.0}, "limits": Limits(max_wall_s=5)},
            "fixed.max_wall_s",
            "[limits]",
        ),
    ]
    for overrides, field, text in cases:
        with pytest.raises(FieldError) as err:
            StudySpec(**{**parts, **overrides})
        assert err.value.field == field and text in err.value.problem, str(err.value)


def test_parse_bytes_names_the_key() -> None:
    assert parse_bytes("1k", key="--budget") == 1000
    with pytest.raises(SweepsError, match=r"^--budget must be a size .* got --budget='x'$"):
        parse_bytes("x", key="--budget")
