"""A JSON Schema of the spec's TOML layout, generated from the types the reader builds (for an
editor's completion and checking: Taplo / Even Better TOML read a ``#:schema spec.schema.json``
line). It says which keys exist, their value types, defaults and meanings; what needs more than
a type (ranges, conditions, the cross-checks that build real configs) stays the reader's, which
names the key and the value when something is wrong."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from lm.config import PARAMETRIZATIONS, TrainConfig, default_of
from sweeps.spec.engine import ENGINE_KEYS
from sweeps.spec.engine import ENGINE_NAMES as ENGINES
from sweeps.spec.limits import CollapseLimits, DivergenceLimits, Limits
from sweeps.spec.reader import _CORPUS_KEYS, _PARAM_KEYS, _TOP_KEYS
from sweeps.spec.types import (
    Objective,
    ParamSpec,
    PrunerSpec,
    SamplerSpec,
    StudySection,
)
from sweeps.spec.values import CORPUS_FORMATS, METRICS, PRUNERS, SAMPLERS

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"


def value_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one type hint (None, TOML's missing value, is left out)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [value_schema(a) for a in typing.get_args(hint) if a is not type(None)]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return {"type": "array", **({"items": value_schema(args[0])} if args else {})}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return table(hint)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}
    return {"type": simple[hint]} if hint in simple else {}


def table(
    cls: type, *, skip: tuple[str, ...] = (), override: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A TOML table of ``cls``'s keys (its fields, less bookkeeping ones), each with its type,
    default and help; unknown keys refused, as the reader refuses them."""
    hints = typing.get_type_hints(cls)
    override = override or {}
    properties = {}
    for f in dataclasses.fields(cls):
        if not f.compare or not f.init or f.name in skip:
            continue
        prop = dict(override.get(f.name) or value_schema(hints[f.name]))
        default = f.default if f.default is not dataclasses.MISSING else None
        if cls is TrainConfig:  # a budget's token default is not the dataclass's None
            default = default_of(f)
        if isinstance(default, (bool, int, float, str)):
            prop["default"] = default
        elif isinstance(default, tuple):
            prop["default"] = list(default)
        if f.metadata.get("help"):
            prop["description"] = f.metadata["help"]
        properties[f.name] = prop
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _named(cls: type, names: tuple[str, ...]) -> dict[str, Any]:
    """A name alone (``sampler = "tpe"``) or a table with the name and options."""
    return {"anyOf": [{"enum": list(names)}, {**table(cls), "required": ["name"]}]}


def _rule(cls: type) -> dict[str, Any]:
    """``true``/``false`` (the rule on with its defaults, or off) or a table of thresholds."""
    return {"anyOf": [{"type": "boolean"}, table(cls, skip=("enabled",))]}


def engine_schema() -> dict[str, Any]:
    """The ``[engine]`` table: ``name`` picks the engine, the rest are the Slurm engine's
    options (``sweeps.engines.slurm``, which checks their values)."""
    text, count = {"type": "string"}, {"type": "integer", "minimum": 0}
    props: dict[str, Any] = {
        "name": {"enum": list(ENGINES), "default": "local"},
        "partition": text,
        "time": text,
        "account": text,
        "qos": text,
        "jobs": {"type": "integer", "minimum": 1, "default": 1},
        "gpus_per_job": count,
        "sbatch_args": {"type": "array", "items": {"type": "string", "pattern": "^--"}},
    }
    assert set(props) == set(ENGINE_KEYS)
    return {"type": "object", "additionalProperties": False, "properties": props}


def spec_schema() -> dict[str, Any]:
    """The whole spec: its top-level tables, each from its type."""
    fixed = table(TrainConfig, skip=("corpus",))
    top = {
        "study": study_schema(),
        "corpus": corpus_schema(),
        "fixed": fixed,
        "space": {
            "type": "object",
            "additionalProperties": {"anyOf": [{"type": "array"}, param_schema()]},
            "propertyNames": {"enum": list(fixed["properties"])},
        },
        "limits": limits_schema(),
        "enqueue": {"type": "array", "items": {"type": "object"}},
        **design_schemas(),
        "engine": engine_schema(),
    }
    assert set(top) == set(_TOP_KEYS)
    return {
        "$schema": SCHEMA_URI,
        "title": "sweeps study spec",
        "type": "object",
        "properties": top,
        "required": ["study", "corpus"],
        "additionalProperties": False,
    }


def study_schema() -> dict[str, Any]:
    """The ``[study]`` table: a metric or an objective table per objective, a sampler's or a
    pruner's name alone or with its options."""
    objective = {"anyOf": [{"enum": list(METRICS)}, {**table(Objective), "required": ["metric"]}]}
    study = table(
        StudySection,
        override={
            "objectives": {"type": "array", "items": objective, "default": ["val_bpb"]},
            "sampler": _named(SamplerSpec, SAMPLERS),
            "pruner": _named(PrunerSpec, PRUNERS),
            "n_trials": {"type": "integer"},
            "seed": {"type": "integer"},
            "timeout": {"type": "number"},
        },
    )
    study["required"] = ["name"]
    return study


def corpus_schema() -> dict[str, Any]:
    """The ``[corpus]`` table: a prepared directory, or a source or synthetic corpus to
    prepare."""
    corpus: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "dir": {"type": "string", "description": "A prepared corpus directory."},
            "source": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                "description": 'A Posts.xml, or text files with format = "text".',
            },
            "format": {"enum": list(CORPUS_FORMATS)},
            "synthetic": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "size": {"type": ["string", "integer"]},
                    "seed": {"type": "integer", "default": 0},
                },
            },
            "out": {"type": "string", "description": "Where source or synthetic is prepared."},
            "val_fraction": {"type": "number", "default": 0.05},
        },
    }
    assert set(corpus["properties"]) == set(_CORPUS_KEYS)
    return corpus


def param_schema() -> dict[str, Any]:
    """One ``[space.<field>]`` table (a list of choices is the other way to write one)."""
    param = table(
        ParamSpec,
        skip=("name",),
        override={
            "low": {"type": "number"},
            "high": {"type": "number"},
            "step": {"type": "number"},
            "choices": {"type": "array"},
            "when": {"type": "string", "description": "e.g. tokenizer == 'word'"},
        },
    )
    assert set(param["properties"]) == set(_PARAM_KEYS)
    return param


def limits_schema() -> dict[str, Any]:
    """The ``[limits]`` table: a memory budget in bytes or words, the two rules on or off or
    with their thresholds."""
    return table(
        Limits,
        override={
            "memory_budget": {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "default": "auto",
            },
            "collapse": _rule(CollapseLimits),
            "divergence": _rule(DivergenceLimits),
        },
    )


def design_schemas() -> dict[str, Any]:
    """The ``[ablation]``, ``[scaling]`` and ``[transfer]`` tables (``sweeps.spec.designs``)."""
    return {
        "ablation": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "baseline": {"type": "object"},
                "vary": {"type": "object"},
                "seeds": {"type": "array", "items": {"type": "integer"}},
            },
        },
        "scaling": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "budgets": {"type": "array", "items": {"type": "number"}},
                "sizes": {"type": "array", "items": {"type": "object"}},
                "seeds": {"type": "array", "items": {"type": "integer"}},
            },
        },
        "transfer": {
            "type": "object",
            "additionalProperties": False,
            "required": ["widths", "lrs"],
            "properties": {
                "widths": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1},
                    "minItems": 2,
                    "description": "Widths (d_model), increasing; heads scaled to keep d_head.",
                },
                "lrs": {
                    "type": "array",
                    "items": {"type": "number", "exclusiveMinimum": 0},
                    "minItems": 3,
                    "description": "The learning-rate grid, increasing (octaves suit the fit).",
                },
                "parametrizations": {
                    "type": "array",
                    "items": {"enum": list(PARAMETRIZATIONS)},
                    "default": list(PARAMETRIZATIONS),
                },
                "seeds": {"type": "array", "items": {"type": "integer"}},
                "d_head": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The head width every width keeps [default: fixed "
                    "d_model / n_heads].",
                },
                "base_width": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "µP's base width [default: the narrowest width].",
                },
            },
        },
    }
