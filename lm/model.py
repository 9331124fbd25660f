"""A small GPT decoder: token + learned position embeddings, pre-LayerNorm blocks, tied head.

Shapes use B (batch), T (positions), C (d_model), H (heads), D (C // H), F (d_ff), V (vocab).
The parameter count is ``lm.config.param_breakdown(cfg)`` (pure arithmetic, checked against this
module by the tests), so the orchestrator can size a model without building it.

``parametrization="mup"`` is µP (Yang et al. 2022, "Tensor Programs V", Table 3: µP against SP
per kind of weight, its Adam rows; and its equivalent form with an output multiplier, Table 8,
the one the authors' ``mup`` package implements as ``MuReadout``/``MuAdam``). With the width
multiplier m = d_model / base_width:
- hidden matrices (qkv, proj, up, down; fan-in and fan-out both grow with width): init std
  / sqrt(m) (init variance 1/fan_in) here, AdamW rate / m in ``lm.step.make_optimizer``;
- the readout: its input multiplied by 1/m = base_width / d_model (Table 8's output multiplier
  1/fan_in), its init and rate unscaled;
- embeddings (token, position), biases and LayerNorms: unscaled (one dimension grows with width,
  "vector-like": init and Adam rate independent of width);
- attention logits q.k / d_head instead of / sqrt(d_head) (the paper's 1/d attention: q and k
  grow correlated in training, so q.k grows like d_head, not like its root), times
  sqrt(base_d_head) so it is SP's at the base head width (the ``mup`` README's "8/d": SP's at
  d = 64). With heads scaled to keep d_head that constant is sqrt(d_head) and the scale is
  SP's at every width: 1/d matters only when d_head itself grows;
- tied embeddings: the readout is the embedding matrix, multiplied as above, the way
  ``mup.MuSharedReadout`` shares it: an embedding in init and rate, a readout in the forward.
m = 1 multiplies by exactly 1 everywhere, so µP at d_model == base_width trains as SP, bit for bit
(``tests/lm/test_mup.py``). d_ff is scaled by the same m: keep d_ff / d_model fixed across widths
(the down projection's fan-in is d_ff).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from lm.config import ModelConfig, param_breakdown

__all__ = ["GPT", "ModelConfig", "param_breakdown"]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        # µP's 1/d_head logits (module docstring); None: SP's 1/sqrt(d_head), sdpa's default.
        mult = cfg.attention_mult
        self.scale = None if mult == 1.0 else mult / math.sqrt(cfg.d_model // cfg.n_heads)
        self.attention = cfg.attention
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.attn_drop = nn.Dropout(cfg.dropout)
        # The naive path's causal mask, built once; not a parameter and not saved (a checkpoint
        # holds weights only, and sdpa never needs it).
        mask = torch.tril(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)
        self.mask: torch.Tensor  # what register_buffer set, for the type checker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        # (B, T, C) -> (B, H, T, D)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                is_causal=True,
                dropout_p=self.dropout if self.training else 0.0,
                scale=self.scale,
            )
        else:
            # The memory ablation: the full (B, H, T, T) score matrix is materialized. q is
            # scaled before the product: in fp16 (max 65504) the unscaled q @ k^T overflows
            # to inf, and the softmax then gives NaN, sqrt(D) times sooner than the scores do.
            q = q * (1.0 / math.sqrt(k.size(-1)) if self.scale is None else self.scale)
            att = q @ k.transpose(-2, -1)  # (B, H, T, T)
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            att = self.attn_drop(F.softmax(att, dim=-1))
            y = att @ v  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, H, T, D) -> (B, T, C)
        return self.resid_drop(self.proj(y))


class FeedForward(nn.Module):
    """C -> F -> C with GELU; F is independent of C (``d_ff = 1`` is a legal, useless model)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(F.gelu(self.up(x))))  # (B, T, C) -> (B, T, F) -> (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight
        # µP's readout multiplier base_width / d_model (1.0 under sp), on the head's (B, T, C)
        # input as mup's MuReadout does: the (B, T, V) logits are not copied.
        self.readout_mult = cfg.base_width / cfg.d_model if cfg.parametrization == "mup" else 1.0
        # µP: a hidden matrix's init std / sqrt(m) (variance 1/fan_in; 1.0 at m = 1 and under sp).
        hidden_std = 1.0 / math.sqrt(cfg.width_mult)
        self.apply(lambda module: self._init_weights(module, hidden_std))
        # GPT-2's scaled init of the residual projections keeps the residual stream's variance
        # from growing with depth.
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "down.weight")):
                std = 0.02 / math.sqrt(2 * cfg.n_layers) * hidden_std
                nn.init.normal_(p, mean=0.0, std=std)

    def _init_weights(self, module: nn.Module, hidden_std: float) -> None:
        if isinstance(module, nn.Linear):
            # The head (a readout) and the embeddings keep SP's std under µP.
            std = 0.02 if module is self.lm_head else 0.02 * hidden_std
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def hidden_matrices(self) -> list[nn.Parameter]:
        """The weights µP calls hidden (fan-in and fan-out both grow with width): every block's
        linear weights; not the embeddings, the head, biases or norms."""
        return [
            p
            for name, p in self.blocks.named_parameters()
            if name.endswith(("qkv.weight", "proj.weight", "up.weight", "down.weight"))
        ]

    def num_params(self) -> int:
        """Distinct parameters (a tied head is counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> logits (B, T, V); position t sees positions <= t only."""
        T = idx.size(1)
        if self.wpe.num_embeddings < T:
            raise ValueError(f"sequence of {T} tokens is longer than seq_len={self.cfg.seq_len}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for block in self.blocks:
            if self.cfg.checkpointing and self.training and torch.is_grad_enabled():
                # Recompute the block's activations in backward instead of storing them.
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        x = self.ln_f(x)
        if self.readout_mult != 1.0:
            x = x * self.readout_mult
        return self.lm_head(x)  # (B, T, C) -> (B, T, V)
