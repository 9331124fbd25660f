"""The trainable state of a run, taken and put back: what a resume checkpoint (``resume.pt``)
and a cooldown read's branch (``lm.cooldown``) both hold, so the two restore the same parts;
and the resume checkpoint's loading and the checkpoints' atomic writing.

The parts: the weights, AdamW's state, the gradient scaler's, the batch sampler's generator
(the data position: batches are drawn, not read in order) and torch's CPU and CUDA generators
(dropout). ``take(..., copy=True)`` copies every tensor to the host: the live ones change in
place as training goes on, and a copy on the host costs the device no memory.
"""

from __future__ import annotations

import copy as copying
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm.config import TrainConfig
from lm.errors import SweepsError
from lm.run_files import RESUME_FILE

#: The keys of ``Trainables.take()``, stored as they are in ``resume.pt``.
STATE_KEYS = ("model", "optimizer", "scaler", "sampler", "torch_rng", "cuda_rng")


@dataclass
class Trainables:
    """The live objects a run trains with."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    rng: np.random.Generator  # the batch sampler's
    device: torch.device

    def take(self, *, copy: bool) -> dict[str, Any]:
        """The state (``STATE_KEYS``); ``copy``: tensors copied to the host (the state is kept
        while training goes on), else the weights only moved there (it is saved at once)."""
        cuda = self.device.type == "cuda"
        optimizer = self.optimizer.state_dict()
        return {
            "model": on_host(self.model.state_dict(), copy=copy),
            "optimizer": _to_host(optimizer) if copy else optimizer,
            "scaler": copying.deepcopy(self.scaler.state_dict()),
            "sampler": self.rng.bit_generator.state,  # a fresh dict of ints at each call
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(self.device) if cuda else None,
        }

    def put(self, state: dict[str, Any]) -> None:
        """Back to ``state`` (from ``take``, or a loaded ``resume.pt``)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.rng.bit_generator.state = state["sampler"]
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)


def load_resume(cfg: TrainConfig, run_dir: Path) -> dict[str, Any] | None:
    """``run_dir``'s resume checkpoint when it continues ``cfg``, None when there is none;
    another configuration's, or an unreadable one, is a one-line ``SweepsError``."""
    path = run_dir / RESUME_FILE
    if not path.is_file():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a foreign or truncated file: torch's errors vary
        raise SweepsError(
            f"{path} cannot be read as a resume checkpoint "
            f"({type(exc).__name__}); delete it to train from the start"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("resume_fingerprint") != cfg.resume_fingerprint():
        theirs = ckpt.get("config", {}) if isinstance(ckpt, dict) else {}
        ours = cfg.computation()
        differs = next(
            (
                f"{k}={theirs.get(k)!r} there, {v!r} here"
                for k, v in ours.items()
                if theirs.get(k) != v
            ),
            "another fingerprint",
        )
        raise SweepsError(
            f"{path} is a checkpoint of another configuration ({differs}); "
            "delete it to train this one from the start"
        )
    return ckpt


def save_atomic(path: Path, obj: dict[str, Any]) -> None:
    """``torch.save`` to a temporary name, then rename: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Through a file object: a failed write then keeps its OSError (as the context of
        # torch's RuntimeError), so a full disk is told from a bug.
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half checkpoint behind
        raise


def on_host(state: dict[str, Any], *, copy: bool = False) -> dict[str, Any]:
    """A ``state_dict``'s tensors on the host; ``copy``: copied even when they are there."""
    return {k: v.detach().to("cpu", copy=copy) for k, v in state.items()}


def _to_host(value: Any) -> Any:
    """``value`` with every tensor in it copied to the host (an optimizer's nested state)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v) for v in value)
    return value
