"""The coordinate check: does a parametrization keep every layer's activations the same size as
the model widens? (Yang et al. 2022, "Tensor Programs V"; the ``mup`` package's "coord check".)

The same model is trained for a few steps at each width, heads scaled to keep ``d_head`` and
``d_ff`` scaled to keep ``d_ff / d_model``, from the same seed and the same batches, under SP and
µP (``lm.model``). At each step the forward records the root mean square of the coordinates of:
- ``embedding``: token + position embeddings (the residual stream's input);
- ``attention`` and ``mlp``: each block's attention and feed-forward outputs (all blocks pooled);
- ``logits``: the readout's output;
and after the step's update:
- ``update``: each hidden matrix's update RMS times its fan-in, pooled over the matrices: the
  size of the update's effect on an input it is aligned with (a sum of fan-in correlated terms).
  AdamW's update entries are about lr whatever the width, so under SP this grows with width and
  under µP (lr / m) it stays put.

Step 1 is measured at initialisation (its forward runs before any update): there µP's logits
shrink like 1/sqrt(width) (a random readout of width terms times 1/width; the ``mup`` README's
first exception, gone once training correlates the readout with its input). From step 2 on,
under µP each row is flat across widths (the check passes); under SP the logits, the blocks'
outputs and the updates grow with width once training moves the weights: the reason a learning
rate tuned narrow does not transfer wide. The rate is constant (no warm-up, no decay) so every
step moves the weights by the same rule; a large one (the ``mup`` README's advice) shows a wrong
scaling sooner. A step is one micro-batch of ``batch_size`` windows in fp32 (``grad_accum`` and
``precision`` do not change what is checked).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from lm.config import PARAMETRIZATIONS, TrainConfig
from lm.errors import SweepsError
from lm.model import GPT, CausalSelfAttention, FeedForward
from lm.runtime import resolve_device
from lm.step import BatchSampler, lm_loss, make_optimizer

#: What each row measures, in the order the table and the chart show them.
LAYERS = ("embedding", "attention", "mlp", "logits", "update")
DEFAULT_WIDTHS = (32, 64, 128, 256)
DEFAULT_STEPS = 5


@dataclass(frozen=True)
class CoordRow:
    """One measurement: the RMS of ``layer`` at ``step`` of the model of ``width``."""

    parametrization: str
    width: int
    step: int
    layer: str
    rms: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_widths(text: str) -> tuple[int, ...]:
    """``"32,64,128"`` -> (32, 64, 128): at least two distinct positive widths, increasing."""
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SweepsError(
            f"--widths must be integers separated by commas, got {text!r}; e.g. 32,64,128,256"
        ) from None
    if len(widths) < 2 or any(w < 1 for w in widths) or list(widths) != sorted(set(widths)):
        raise SweepsError(
            f"--widths must be two or more increasing positive widths, got {text!r}; "
            "e.g. 32,64,128,256"
        )
    return widths


def width_config(cfg: TrainConfig, width: int, parametrization: str) -> TrainConfig:
    """``cfg`` at ``d_model = width``: heads scaled to keep its ``d_head``, ``d_ff`` to keep
    ``d_ff / d_model``; everything else (``base_width`` included) as given."""
    d_head = cfg.d_model // cfg.n_heads
    if width % d_head:
        raise SweepsError(
            f"width {width} is not a multiple of d_head={d_head} (d_model {cfg.d_model} / "
            f"n_heads {cfg.n_heads}), which every width keeps; use multiples of {d_head} or "
            "set n_heads so that d_model / n_heads divides every width"
        )
    return dataclasses.replace(
        cfg,
        d_model=width,
        n_heads=width // d_head,
        d_ff=max(1, round(cfg.d_ff * width / cfg.d_model)),
        parametrization=cast(Any, parametrization),  # TrainConfig checks it is sp or mup
    )


def coord_check(
    cfg: TrainConfig,
    tokens: np.ndarray,
    vocab_size: int,
    widths: Sequence[int] = DEFAULT_WIDTHS,
    *,
    steps: int = DEFAULT_STEPS,
    parametrizations: Sequence[str] = PARAMETRIZATIONS,
) -> list[CoordRow]:
    """Every (parametrization, width, step, layer) of ``steps`` training steps of ``cfg`` at
    each width on ``tokens`` (a training split's ids, ``vocab_size`` of them)."""
    if steps < 1:
        raise SweepsError(f"--steps must be >= 1, got {steps}")
    configs = [(p, w, width_config(cfg, w, p)) for p in parametrizations for w in widths]
    rows: list[CoordRow] = []
    for p, w, c in configs:
        for step, values in enumerate(_train(c, tokens, vocab_size, steps), start=1):
            rows += [CoordRow(p, w, step, layer, values[layer]) for layer in LAYERS]
    return rows


class _Probes:
    """Forward hooks that pool each layer's sum of squares and element count."""

    def __init__(self, model: GPT) -> None:
        self.sums: dict[str, list[float]] = {}
        self.handles = [model.drop.register_forward_hook(self._hook("embedding"))]
        for module in model.modules():  # every block's
            if isinstance(module, CausalSelfAttention):
                self.handles.append(module.register_forward_hook(self._hook("attention")))
            elif isinstance(module, FeedForward):
                self.handles.append(module.register_forward_hook(self._hook("mlp")))
        self.handles.append(model.register_forward_hook(self._hook("logits")))

    def _hook(self, layer: str) -> Any:
        def record(_module: Any, _inputs: Any, output: torch.Tensor) -> None:
            out = output.detach().float()
            total = self.sums.setdefault(layer, [0.0, 0.0])
            total[0] += float(out.square().sum())
            total[1] += out.numel()

        return record

    def take(self) -> dict[str, float]:
        """The RMS of each layer since the last take."""
        values = {layer: math.sqrt(s / n) for layer, (s, n) in self.sums.items()}
        self.sums = {}
        return values

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _train(
    cfg: TrainConfig, tokens: np.ndarray, vocab_size: int, steps: int
) -> list[dict[str, float]]:
    """Each step's RMS of every layer (``LAYERS``) for one width."""
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config(vocab_size=vocab_size)).to(device)
    model.train()
    optimizer = make_optimizer(model, cfg, device)  # at cfg.lr, constant
    hidden = model.hidden_matrices()
    # The same batches at every width and under either parametrization.
    sampler = BatchSampler(tokens, cfg.seq_len, cfg.batch_size, cfg.seed)
    probes = _Probes(model)
    out = []
    try:
        for _ in range(steps):
            batch = sampler.next().to(device)
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(lm_loss(model, batch))
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            before = [p.detach().clone() for p in hidden]
            optimizer.step()
            values = probes.take()
            values["update"] = _update_size(hidden, before)
            out.append(values)
    finally:
        probes.remove()
    return out


def _update_size(hidden: list[torch.nn.Parameter], before: list[torch.Tensor]) -> float:
    """The root mean square over hidden matrices of RMS(update) x fan-in (module docstring)."""
    sizes = [
        float((p.detach() - b).float().square().mean().sqrt()) * p.shape[1]
        for p, b in zip(hidden, before, strict=True)
    ]
    return math.sqrt(sum(s * s for s in sizes) / len(sizes))


# --- reading the rows ----------------------------------------------------------------------------


def growth(rows: Sequence[CoordRow], parametrization: str, layer: str, step: int) -> float:
    """RMS at the widest width over RMS at the narrowest, at ``step``: 1 is flat."""
    at = sorted(
        (r.width, r.rms)
        for r in rows
        if r.parametrization == parametrization and r.layer == layer and r.step == step
    )
    if len(at) < 2:
        raise ValueError(f"no two widths of {parametrization} {layer} at step {step}")
    return at[-1][1] / at[0][1] if at[0][1] > 0 else math.inf


def spread(rows: Sequence[CoordRow], parametrization: str, layer: str, step: int) -> float:
    """Largest RMS over smallest across widths, at ``step``: 1 is flat, whichever way it moves."""
    values = [
        r.rms
        for r in rows
        if r.parametrization == parametrization and r.layer == layer and r.step == step
    ]
    return max(values) / min(values) if min(values) > 0 else math.inf


def table(rows: Sequence[CoordRow], step: int | None = None) -> list[dict[str, Any]]:
    """One row per (parametrization, layer) at ``step`` (default: the last): the RMS at each
    width, its growth (widest / narrowest) and spread (max / min)."""
    last = step if step is not None else max(r.step for r in rows)
    out = []
    for p in dict.fromkeys(r.parametrization for r in rows):
        for layer in LAYERS:
            at = {
                r.width: r.rms
                for r in rows
                if r.parametrization == p and r.layer == layer and r.step == last
            }
            if not at:
                continue
            out.append(
                {
                    "parametrization": p,
                    "layer": layer,
                    "step": last,
                    **{f"w{w}": v for w, v in sorted(at.items())},
                    "growth": growth(rows, p, layer, last),
                    "spread": spread(rows, p, layer, last),
                }
            )
    return out
