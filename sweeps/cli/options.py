"""Options shared by the commands, defined once: those generated from a config dataclass (one
``--kebab-name`` per field), ``--storage``, ``--runs-dir``, ``--launcher``, ``--heartbeat``,
``--grace``, ``--config``, and reading a ``--config`` TOML file.

Study specs and CLI flags use the same names as ``TrainConfig``'s fields; generating the options
from the dataclass keeps the three in step (a new field is a new flag, with no second list to edit).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import tomllib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from lm.errors import SweepsError


def _cli_type(hint: Any) -> Any:
    """The type Typer should parse for a dataclass field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _cli_type(args[0])
    if origin is typing.Literal:
        return str
    if origin in (tuple, list):
        item = typing.get_args(hint)[:1]
        # a type built at run time, for Typer: the checker cannot read it
        return list[item[0] if item and item[0] in (int, float) else str]  # type: ignore[misc]
    return hint


def with_config_options(config_cls: type, *, panel: str = "Config") -> Callable[..., Any]:
    """Decorate ``fn(overrides: dict, **other)`` so each field of ``config_cls`` is an option.

    Options left out on the command line are absent from ``overrides`` (so a ``--config`` file or
    the dataclass default applies).
    """
    hints = typing.get_type_hints(config_cls)
    # A field the tool sets (``lm.config``'s derivation record) is no flag: a config.json holds it.
    fields = [
        f for f in dataclasses.fields(config_cls) if f.init and not f.metadata.get("set_by_tool")
    ]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        # The command's own hints, resolved in its module (it may use postponed annotations).
        own_hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(annotation=own_hints.get(p.name, p.annotation))
            for p in inspect.signature(fn).parameters.values()
            if p.name != "overrides"
        ]
        generated = []
        for field in fields:
            cli_type = _cli_type(hints[field.name])
            flag = "--" + field.name.replace("_", "-")
            decls = [f"{flag}/--no-{flag[2:]}"] if cli_type is bool else [flag]
            help_text = field.metadata.get("help", "")
            shown = default_text(field)
            if shown is not None:  # the dataclass's default: the option's own is None (unset)
                help_text = f"{help_text} [default: {shown}]"
            option = typer.Option(*decls, help=help_text, rich_help_panel=panel, show_default=False)
            # Typer needs Optional; a type built at run time, which the checker cannot read
            annotation = Annotated[Optional[cli_type], option]  # type: ignore[valid-type]  # noqa: UP045
            generated.append(
                inspect.Parameter(
                    field.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
                )
            )

        def wrapper(**kwargs: Any) -> Any:
            overrides = {}
            for field in fields:
                value = kwargs.pop(field.name, None)
                if value is not None:
                    overrides[field.name] = tuple(value) if isinstance(value, list) else value
            return fn(overrides=overrides, **kwargs)

        own_names = {p.name for p in own}
        clash = own_names & {f.name for f in fields}
        if clash:
            raise TypeError(f"options clash with config fields: {sorted(clash)}")
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + generated
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        return wrapper

    return decorate


def default_text(field: dataclasses.Field[Any]) -> str | None:
    """A config field's default as help text shows it (None: the field has none)."""
    from lm.config import default_of

    if field.name == "vocab_size":
        return vocab_size_default_text()
    value = default_of(field)
    if value is dataclasses.MISSING:
        return None
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or "none"
    return f"{value:_}" if isinstance(value, int) else str(value)


def read_toml(path: Path, *, what: str) -> dict[str, Any]:
    """A TOML file as a dict; one-line errors for a missing or malformed file."""
    if not path.exists():
        raise SweepsError(f"{what} {path} does not exist; give the path of a TOML file")
    if path.is_dir():
        raise SweepsError(f"{what} {path} is a directory; give the path of a TOML file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepsError(f"{what} {path} is not valid TOML: {exc}; fix the syntax there") from None
    except UnicodeDecodeError:
        raise SweepsError(f"{what} {path} is not UTF-8 text; save it as UTF-8 TOML") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """``--config``: TOML, or JSON when it ends in ``.json`` (a run's ``config.json``, so
    ``sweeps train --config RUN_DIR/config.json`` trains that trial's exact configuration)."""
    if path.suffix.lower() != ".json":
        return read_toml(path, what="--config")
    if not path.is_file():
        raise SweepsError(f"--config {path} is not a file; give a run's config.json or a TOML file")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SweepsError(
            f"--config {path} is not valid JSON ({exc}); give a run's config.json or a TOML file"
        ) from None
    if not isinstance(values, dict):
        raise SweepsError(f"--config {path} holds no JSON object of TrainConfig fields")
    return values


# --- options shared by several commands ----------------------------------------------------------

StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Database URL [default: $SWEEPS_STORAGE, the spec's storage "
        "(sweeps run), else sqlite:///sweeps.db].",
    ),
]
RunsDirOption = Annotated[
    Path, typer.Option("--runs-dir", help="Trials run in RUNS_DIR/<study>/trials/<number>.")
]
LauncherOption = Annotated[
    str,
    typer.Option(
        "--launcher",
        help="fork (a preloaded fork server: fast start, Linux), "
        "subprocess (a fresh interpreter per trial) or auto.",
    ),
]
HeartbeatOption = Annotated[
    int, typer.Option("--heartbeat", help="Seconds between a running trial's heartbeats.")
]
GraceOption = Annotated[
    int,
    typer.Option(
        "--grace",
        help="Seconds without a heartbeat before a trial is failed and "
        "re-queued by another worker.",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="The same as --max-concurrent (kept for "
        "scripts written before admission by memory) "
        "[default: --max-concurrent's].",
    ),
]
MaxConcurrentOption = Annotated[
    int | None,
    typer.Option(
        "--max-concurrent",
        help="At most N trials at once [default: as many as this host's memory and cores hold].",
    ),
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="local (this machine: trials admitted to its "
        "GPUs or CPU by predicted memory), ray (a Ray "
        "cluster; pip install -e '.[ray]'), slurm (a "
        "job array of workers) or replay (no training: "
        "trials read from --table on a simulated clock) [default: the spec's "
        "engine name, else local].",
    ),
]
TableOption = Annotated[
    Path | None,
    typer.Option(
        "--table",
        help="With --engine replay: the table of recorded trials to replay (`sweeps table "
        "export`) [default: none].",
    ),
]
AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="With --engine ray: the cluster to join "
        "[default: $RAY_ADDRESS, a running local "
        "cluster, else a new one on this machine].",
    ),
]
ConfigFileOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A TOML file of TrainConfig fields, or a run's "
        "config.json [default: none: the flags and "
        "the defaults below].",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def flag_checks(values: dict[str, Any], overrides: dict[str, Any]) -> None:
    """The tokenizer's rules on a ``--vocab-size`` given on the command line, checked before the
    config is built so the fix names the flag (``use --vocab-size 260``), not the field."""
    from lm.config import TrainConfig
    from lm.tokenizers import validate_tokenizer_args

    if overrides.get("vocab_size") is None:
        return
    fields = TrainConfig.__dataclass_fields__
    validate_tokenizer_args(
        values.get("tokenizer", fields["tokenizer"].default),
        overrides["vocab_size"],
        values.get("lowercase", False) is True,
        key="--vocab-size",
    )


def vocab_size_default_text() -> str:
    """``vocab_size``'s default as help text shows it (it depends on the tokenizer)."""
    from lm.config import default_vocab_size

    return f"{default_vocab_size('bpe')}; byte: {default_vocab_size('byte')}"


def train_config(
    config_file: Path | None, overrides: dict[str, Any], *, corpus: str | None = None
) -> Any:
    """A ``TrainConfig`` from ``--config`` and the field flags (flags win); ``corpus`` is the
    default corpus (None: ``--corpus`` is required)."""
    from lm import budget
    from lm.config import TrainConfig

    values: dict[str, Any] = read_config_file(config_file) if config_file else {}
    # A budget flag in any unit replaces the file's in every unit, and a run's worked-out token
    # counts are worked out again (an override may change the rate).
    values = budget.override(values, overrides)
    flag_checks(values, overrides)  # a vocab_size left out follows the tokenizer (TrainConfig)
    if corpus is not None:
        values.setdefault("corpus", corpus)
    elif "corpus" not in values:
        raise SweepsError("no corpus given; pass --corpus DIR (from `sweeps prepare`)")
    return TrainConfig.from_dict(values)


def refuse_existing(out: Path, force: bool) -> None:
    """``--out`` that names an existing file is refused unless ``--force`` (init, schema)."""
    if out.exists() and not force:
        raise SweepsError(f"--out {out} already exists; choose another path or pass --force")


def warn(warnings: list[str]) -> None:
    """Budget warnings (``TrainConfig.budget_warnings``), one line each on stderr."""
    from sweeps.console import write_line

    for warning in warnings:
        write_line(f"warning: {warning}")


def config_reference() -> list[tuple[str, str, str]]:
    """(field, default, meaning) of each ``TrainConfig`` field: the table of training fields in
    ``docs/spec.md``, checked against this by ``tests/test_docs.py``."""
    from lm.config import TrainConfig

    return [
        (
            f.name,
            "required" if (shown := default_text(f)) is None else f"`{shown}`",
            f.metadata.get("help", ""),
        )
        for f in dataclasses.fields(TrainConfig)
        if f.init
    ]
