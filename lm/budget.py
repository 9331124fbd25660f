"""Budgets in the unit that is fair: tokens, bytes of training text, or training FLOPs.

At equal tokens a larger vocabulary sees more text (a BPE token of the 4k size stands for
about 4.4 bytes of Stack Exchange text, a byte token for 1) and spends more compute per token
(its head is V x d): a vocabulary ablation at equal tokens compares arms that read 4x
different amounts of text.
So each budget quantity of a run (``lm.config.BUDGETS``: its length, its evaluation interval,
its warm-up, its validation subset) is given in one unit, and its token count is worked out
here, per trial, from that trial's own rate:

- **bytes**: the training split's bytes of user text per token for this tokenizer and size
  (``TextRate.train``: measured on the token cache, ``lm.tokens``; the markers stand for no
  text). ``eval_bytes`` uses the validation split's rate (and the child then takes exactly the
  windows that cover that much of the validation text, ``lm.train.eval_windows``).
- **flops**: training FLOPs per token of this model (``lm.flops.per_token``), the run's own
  training (a cooldown read's branch is measurement, counted beside it in ``lm.flops``).

The length is worked out in whole sequences, and the child's last optimizer step trains only the
sequences the budget has left (``lm.train``), so arms of different vocabularies end within one
sequence of the same text or compute; a budget in tokens keeps whole steps, as it always has.
``derived`` on the config lists the token counts worked out, so a ``config.json`` says which
number governs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from lm import flops, tokens
from lm.config import BUDGET_UNITS, BUDGETS, TrainConfig
from lm.errors import SweepsError
from lm.tokens import TextRate, guessed_rate


def needs_text(cfg: TrainConfig) -> bool:
    """Whether resolving ``cfg`` needs its bytes per token (some quantity is in bytes)."""
    return any(cfg.budget_unit(q) == "bytes" for q in BUDGETS)


def tokens_per(cfg: TrainConfig, unit: str, rate: TextRate | float | None = None) -> float:
    """How many ``unit`` one training token of ``cfg`` is: 1, its bytes, or its FLOPs."""
    if unit == "tokens":
        return 1.0
    if unit == "bytes":
        value = rate.train if isinstance(rate, TextRate) else rate
        value = value if value is not None else cfg.bytes_per_token
        if value is None:
            raise SweepsError(
                "a budget in bytes needs the corpus' bytes per token for this "
                "tokenizer; it is measured when the token cache is built"
            )
        return float(value)
    if unit == "flops":
        return float(flops.per_token(cfg))
    raise SweepsError(f"unknown budget unit {unit!r}; use one of {', '.join(BUDGET_UNITS)}")


def resolve(cfg: TrainConfig, rate: TextRate | None = None) -> TrainConfig:
    """``cfg`` with every token count worked out from its budget's unit (see the module
    docstring); ``rate`` is needed when a quantity is in bytes. A resolved config is returned as
    it is."""
    if cfg.resolved:
        return cfg
    if needs_text(cfg) and rate is None:
        raise SweepsError(
            "a budget in bytes needs the corpus' bytes per token; build the "
            "token cache first (sweeps tokenize)"
        )
    values: dict[str, Any] = {}
    derived = list(cfg.derived)
    for quantity, fields in BUDGETS.items():
        unit = cfg.budget_unit(quantity)
        tokens_field = fields[0]
        if unit == "tokens":
            continue
        amount = getattr(cfg, fields[BUDGET_UNITS.index(unit)])  # type: ignore[arg-type]  # budget_unit names a unit the quantity has
        if quantity == "eval":
            assert rate is not None
            tokens = max(2, math.ceil(amount / rate.val))
        else:
            per = tokens_per(cfg, unit, rate)
            if quantity == "max":
                # Whole sequences: the child's last step trains only what is left (lm.train).
                tokens = max(1, round(amount / per / cfg.seq_len)) * cfg.seq_len
            else:
                tokens = max(1 if quantity == "eval_every" else 0, round(amount / per))
        values[tokens_field] = int(tokens)
        derived.append(tokens_field)
    if rate is not None and needs_text(cfg):
        values["bytes_per_token"] = float(rate.train)
    return dataclasses.replace(cfg, **values, derived=tuple(dict.fromkeys(derived)))


def amount(cfg: TrainConfig, tokens: float, unit: str | None = None) -> float:
    """``tokens`` training tokens of a resolved ``cfg`` in ``unit`` (default: the unit of its
    budget): bytes of text or FLOPs."""
    return tokens * tokens_per(cfg, unit or cfg.budget_unit())


def to_tokens(cfg: TrainConfig, value: float, unit: str | None = None) -> float:
    """``value`` in ``unit`` (default: its budget's) as training tokens of a resolved ``cfg``."""
    return value / tokens_per(cfg, unit or cfg.budget_unit())


def max_amount(cfg: TrainConfig, unit: str | None = None) -> float:
    """The run's budget in ``unit`` (default: the unit that governs it): as given, else its
    tokens converted."""
    unit = unit or cfg.budget_unit()
    field = BUDGETS["max"][BUDGET_UNITS.index(unit)]
    given = getattr(cfg, field) if field is not None else None
    return (
        float(given)
        if given is not None and field not in cfg.derived
        else amount(cfg, cfg.max_tokens, unit)  # type: ignore[arg-type]  # a resolved cfg
    )


def unresolved(values: dict[str, Any]) -> dict[str, Any]:
    """Config values (a ``config.json``) with the derived token counts taken out again, to be
    worked out afresh: an override (another vocabulary, another batch) changes the rate."""
    derived = values.get("derived") or ()
    out = {k: v for k, v in values.items() if k not in ("derived", "bytes_per_token")}
    for name in derived:
        out.pop(name, None)
    return out


def override(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``new``, where a budget quantity ``new`` gives in any unit replaces
    ``base``'s in every unit (``--max-tokens`` over a config's ``max_bytes`` governs)."""
    out = unresolved(base) if any(k in base for k in ("derived", "bytes_per_token")) else dict(base)
    for fields in BUDGETS.values():
        if any(f in new for f in fields if f):
            for f in fields:
                if f:
                    out.pop(f, None)
    out.update(new)
    return out


def corpus_rate(cfg: TrainConfig, *, build: bool) -> TextRate:
    """``cfg``'s tokenizer's rate on its corpus: measured on the token cache (built first when
    ``build``), else from a cache that exists, else guessed (``measured`` False)."""
    assert cfg.vocab_size is not None  # TrainConfig sets it
    args = (cfg.corpus, cfg.tokenizer, cfg.vocab_size, cfg.lowercase)
    if build:
        return tokens.measured_rate(*args)
    return tokens.cached_rate(*args) or guessed_rate(cfg.tokenizer)


def describe(cfg: TrainConfig, rate: TextRate | None = None) -> str:
    """One line on what a resolved ``cfg`` trains: its budget as given, then what it comes to
    (``max_bytes = 200,000: 73,728 tokens at 2.71 bytes per token (200,075 bytes of text,
    2.76e+10 FLOPs)``)."""
    unit = cfg.budget_unit()
    field = BUDGETS["max"][BUDGET_UNITS.index(unit)]
    assert field is not None and cfg.max_tokens is not None  # resolved; its unit has a field
    given = getattr(cfg, field)
    shown = f"{given:.3g}" if unit == "flops" else f"{given:,}"
    per_byte = rate.train if rate is not None else cfg.bytes_per_token
    at = f" at {per_byte:.2f} bytes per token" if per_byte is not None else ""
    text = f"{round(cfg.max_tokens * per_byte):,} bytes of text, " if per_byte is not None else ""
    estimated = " (estimated: no token cache yet)" if rate is not None and not rate.measured else ""
    return (
        f"{field} = {shown}: {cfg.max_tokens:,} tokens{at} ({text}"
        f"{cfg.max_tokens * flops.per_token(cfg):.3g} FLOPs){estimated}"
    )
