"""Generation: continue a prompt token by token, from a finished run's best checkpoint
(``generate``) or from the model being trained (the samples of each evaluation in ``lm.train``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lm.checks import require_int
from lm.config import MAX_SEED, ModelConfig, TrainConfig
from lm.errors import SweepsError
from lm.model import GPT
from lm.run_files import CHECKPOINT_FILE, CONFIG_FILE, TOKENIZER_FILE, read_config
from lm.serialization import prompt_to_marked


@torch.no_grad()
def sample_tokens(
    model: GPT,
    ids: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
    device: torch.device,
) -> list[int]:
    """Continue ``ids`` by ``max_new_tokens`` ids (temperature 0: greedy)."""
    was_training = model.training
    model.eval()
    x = torch.tensor([list(ids)], dtype=torch.long, device=device)  # (1, t)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(x[:, -model.cfg.seq_len :])[:, -1, :].float()  # (1, V)
        if temperature == 0:
            nxt = int(logits.argmax(-1))
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.size(-1):
                kth = torch.topk(logits, top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1).cpu()  # sample on the CPU: one seeded stream
            nxt = int(torch.multinomial(probs, 1, generator=generator))
        new.append(nxt)
        x = torch.cat([x, torch.tensor([[nxt]], device=device)], dim=1)
    model.train(was_training)
    return new


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The ids of ``prompt`` (markers ``<Q>``, ``<A>``, ``<D>`` as special tokens)."""
    ids, _ = tokenizer.encode_marked(prompt_to_marked(prompt))
    ids = [int(i) for i in ids]
    # An empty prompt starts a new document, as after a <D> in the corpus.
    return ids or [int(tokenizer.special_ids["<D>"])]


def load_checkpoint(run_dir: Path, cfg: TrainConfig | None = None) -> tuple[GPT, TrainConfig]:
    """The run's best weights in a CPU model (eval mode), checked against its ``config.json``."""
    run_dir = Path(run_dir)
    cfg = cfg or read_config(run_dir)
    path = run_dir / CHECKPOINT_FILE
    if not path.is_file():
        raise SweepsError(
            f"{path} does not exist; the run wrote no checkpoint (it is written at the first "
            "evaluation); train it longer or pick another run"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        fingerprint = ckpt["fingerprint"]
        model_cfg = ModelConfig(**ckpt["model_config"])
        state = ckpt["state_dict"]
    except SweepsError:
        raise
    except Exception as exc:
        raise SweepsError(f"{path} is not a valid checkpoint ({exc}); retrain the run") from None
    if fingerprint != cfg.fingerprint():
        raise SweepsError(
            f"{path} was trained with another config (fingerprint {fingerprint}, but "
            f"{run_dir / CONFIG_FILE} gives {cfg.fingerprint()}); use the run dir it came from"
        )
    model = GPT(model_cfg)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise SweepsError(f"{path} does not fit its model config: {first}") from None
    model.eval()
    return model, cfg


#: The smallest non-zero temperature: logits divided by less overflow float32 to inf, and the
#: softmax of inf - inf is NaN (1e-300 was a traceback). Below this, sampling is greedy anyway.
MIN_TEMPERATURE = 1e-6


def generate(
    run_dir: Path,
    prompt: str,
    *,
    max_new_tokens: int = 100,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """The prompt and its continuation by the run's best checkpoint, markers shown as ``<Q>``."""
    from lm.tokenizers import load_tokenizer

    if max_new_tokens < 0:
        raise SweepsError(f"max_new_tokens must be >= 0, got max_new_tokens={max_new_tokens}")
    if not math.isfinite(temperature) or temperature < 0 or 0 < temperature < MIN_TEMPERATURE:
        raise SweepsError(
            f"temperature must be 0 (greedy) or a number from {MIN_TEMPERATURE:g}, "
            f"got temperature={temperature}"
        )
    require_int(seed, "seed", 0, MAX_SEED)  # the same range as training's seed
    if top_k is not None and top_k < 1:
        raise SweepsError(f"top_k must be >= 1, got top_k={top_k}")
    run_dir = Path(run_dir)
    model, _ = load_checkpoint(run_dir)
    tok_path = run_dir / TOKENIZER_FILE
    if not tok_path.is_file():
        raise SweepsError(f"{tok_path} does not exist; the run dir is incomplete, retrain it")
    tokenizer = load_tokenizer(tok_path)
    ids = prompt_ids(tokenizer, prompt)
    new = sample_tokens(
        model,
        ids,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        generator=torch.Generator().manual_seed(seed),
        device=torch.device("cpu"),
    )
    return tokenizer.decode(ids + new)
