"""What each vocabulary of a study trains on, before it trains: tokens, bytes of text, FLOPs and
what it drops to ``<unk>``, per arm (each tokenizer, vocabulary size and case folding its trials
use), so arms on unequal budgets are named before an hour is spent on them.

At equal tokens a larger vocabulary reads more text (on the history dump a token of BPE at
4k ids is 4.1 bytes, at 260 ids 1.0) and spends more compute per token; a vocabulary ablation
at equal tokens then compares 4x different amounts of text. ``sweeps run --dry-run`` and
``sweeps run`` print ``rows`` and ``table``; ``warning`` is the line they say when the arms are
unequal (``sweeps effects`` and the report say it from the trials' recorded bytes:
``text_warning``).

Rates come from the token caches (``lm.tokens``): ``measured`` builds them (``sweeps run``),
``known`` reads only those that exist (the dry run writes nothing) and leaves the others unknown.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lm import budget, flops, tokens
from lm.config import TrainConfig
from lm.errors import SweepsError
from lm.tokens import TextRate
from sweeps.spec.designs import VOCABULARY_FIELDS

if TYPE_CHECKING:
    from sweeps.spec import StudySpec

#: More arms than this are summarised (a searched vocabulary range has thousands).
MAX_ARMS = 24
TABLE_COLUMNS = ("arm", "tokens", "text", "bytes/token", "FLOPs", "<unk> tokens", "<unk> bytes")


@dataclass(frozen=True)
class Arm:
    """One vocabulary of the study and what one of its trials trains on."""

    label: str  # "tokenizer=bpe vocab_size=1024"
    tokens: int
    flops: float
    rate: TextRate | None  # None: not tokenized yet (a dry run builds nothing)
    #: Its tokens were worked out from a guessed rate (a budget in bytes, not tokenized yet).
    estimated: bool = False

    @property
    def text_bytes(self) -> float | None:
        return self.tokens * self.rate.train if self.rate is not None else None

    def row(self) -> tuple[str, ...]:
        r = self.rate

        def unk(v: float | None) -> str:
            return "-" if v is None else f"{v:.1%}"

        return (
            self.label,
            f"~{self.tokens:,}" if self.estimated else f"{self.tokens:,}",
            f"{self.text_bytes:,.0f} B" if self.text_bytes is not None else "not tokenized",
            f"{r.train:.2f}" if r is not None else "-",
            f"{self.flops:.3g}",
            unk(r.unk_tokens) if r is not None else "-",
            unk(r.unk_bytes) if r is not None else "-",
        )


def vocabulary_points(spec: StudySpec) -> list[dict[str, Any]]:
    """One point per vocabulary the study's trials use: its design's or enqueued points, and
    the searched vocabulary fields' choices (or a range's bounds), everything else at its base."""
    names = [n for n in VOCABULARY_FIELDS if n in spec.param_names]
    if not names:
        return [{}]
    if spec.design is not None or spec.enqueue:
        points = [
            {k: v for k, v in p.items() if k in spec.param_names} for p in spec.initial_trials()
        ]
    else:
        points = []
    enqueued_only = (
        spec.design is None and spec.enqueue and spec.study.n_trials <= len(spec.enqueue)
    )  # the sampler never chooses
    if spec.design is None and not enqueued_only:
        probes = [spec.param(n).probe_values() for n in names]
        points += [
            dict(zip(names, combo, strict=True))
            for combo in itertools.islice(itertools.product(*probes), MAX_ARMS * 4)
        ]
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for point in points:
        key = tuple(point.get(n) for n in names)
        seen.setdefault(key, point)
    return list(seen.values())


def arms(spec: StudySpec, rates: Callable[[TrainConfig], TextRate | None]) -> list[Arm]:
    """Each vocabulary's arm (at most ``MAX_ARMS``): the tokens one of its trials trains, their
    bytes of text at its rate, its FLOPs. Points that make no valid config are left out."""
    from sweeps.space import trial_config

    out: dict[str, Arm] = {}
    for point in vocabulary_points(spec):
        try:
            cfg = trial_config(
                spec, point, rates=lambda c: rates(c) or tokens.guessed_rate(c.tokenizer)
            )
        except SweepsError:
            continue
        label = " ".join(
            f"{k}={getattr(cfg, k)}" for k in VOCABULARY_FIELDS if k != "lowercase" or cfg.lowercase
        )
        if label in out:
            continue
        rate = rates(cfg)
        guessed = rate is None and (budget.needs_text(cfg) or bool(cfg.derived))
        out[label] = Arm(
            label, flops.planned_tokens(cfg), float(flops.count(cfg).flops), rate, guessed
        )
        if len(out) >= MAX_ARMS:
            break
    return list(out.values())


def known(cfg: TrainConfig) -> TextRate | None:
    """The rate of a token cache that exists (None: not tokenized yet; nothing is built)."""
    assert cfg.vocab_size is not None  # TrainConfig sets it
    return tokens.cached_rate(cfg.corpus, cfg.tokenizer, cfg.vocab_size, cfg.lowercase)


def measured(cfg: TrainConfig) -> TextRate:
    """The rate on the token cache, built if needed (``sweeps run``: the trials need it)."""
    return budget.corpus_rate(cfg, build=True)


def unit(spec: StudySpec) -> str:
    """The unit the study's budgets are in (``sweeps.spec.halving.unit``)."""
    from sweeps.spec import halving

    return halving.unit(spec)


def varies_vocabulary(spec: StudySpec) -> bool:
    return any(n in spec.param_names for n in VOCABULARY_FIELDS)


def worth_showing(spec: StudySpec, found: list[Arm]) -> bool:
    """Whether the plan shows the arms' table: the vocabulary varies, or one is a capped word
    vocabulary (what it drops to ``<unk>`` is said before it trains)."""
    return varies_vocabulary(spec) or any(a.label.startswith("tokenizer=word") for a in found)


def warning(spec: StudySpec, found: list[Arm]) -> str | None:
    """The line said when the arms' vocabularies differ under a budget in tokens: each arm's
    bytes of text (where tokenized), and the budget that would make them equal."""
    if not varies_vocabulary(spec) or unit(spec) != "tokens" or len(found) < 2:
        return None
    text = [a for a in found if a.text_bytes is not None]
    if len(text) >= 2:
        amounts = [a.text_bytes for a in text if a.text_bytes is not None]  # all: for the checker
        low, high = min(amounts), max(amounts)
        shown = ", ".join(f"{a.label}: {a.text_bytes:,.0f} B" for a in text)
        ratio = f"{high / low:.1f}x different amounts of text ({shown})" if low else shown
    else:
        ratio = "different amounts of text (not tokenized yet: `sweeps tokenize` measures each)"
    flops_shown = f"{min(a.flops for a in found):.3g} to {max(a.flops for a in found):.3g}"
    return (
        f"the trials vary {', '.join(n for n in VOCABULARY_FIELDS if n in spec.param_names)}"
        f" under a budget in tokens: the arms train on {ratio} and {flops_shown} FLOPs; "
        "give max_bytes (equal text) or max_flops (equal compute) instead of max_tokens to "
        "compare them fairly"
    )


def rows(spec: StudySpec, found: list[Arm]) -> list[tuple[str, object]]:
    """The plan's lines on the budget: its unit, an ablation's equal-text default, and the
    warning when the arms are unequal."""
    u = unit(spec)
    out: list[tuple[str, object]] = []
    a = spec.ablation
    if a is not None and a.equal_unit != "tokens" and a.equal is None:
        out.append(
            (
                "budget",
                f"equal {'text' if u == 'bytes' else u} (the default for an "
                "[ablation] that varies the vocabulary): every arm trains on the "
                f"baseline's {_baseline_amount(spec, found, u)}; ablation.equal "
                '= "tokens" compares at equal tokens instead',
            )
        )
    elif u != "tokens":
        out.append(
            (
                "budget",
                f"in {u}: every trial's tokens are worked out from its own "
                f"{'bytes of text' if u == 'bytes' else 'FLOPs'} per token",
            )
        )
    else:
        out.append(("budget", "in tokens"))
    said = warning(spec, found)
    if said is not None:
        out.append(("unequal arms", said))
    return out


def _baseline_amount(spec: StudySpec, found: list[Arm], u: str) -> str:
    if not found:
        return f"{u} at its rate"
    base = found[0]  # vocabulary_points lists the design's first point, the baseline, first
    if u == "bytes":
        if base.text_bytes is None:
            return "bytes of text (its rate is measured when it is tokenized)"
        assert base.rate is not None  # text_bytes is worked out from it
        return (
            f"{base.text_bytes:,.0f} bytes of text ({base.label}, {base.rate.train:.2f} "
            "bytes per token)"
        )
    return f"{base.flops:.3g} training FLOPs ({base.label})"
