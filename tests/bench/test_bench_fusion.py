"""The fusion probe's model on the CPU: K models fused are the K models (the same losses and,
after an AdamW step, the same weights), so the GPU kit's timing compares like with like."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fusion as bf

from lm.train import lm_loss


def test_the_fused_loss_is_each_models_own_loss() -> None:
    cfg = bf.model_config(64)
    models = bf.make_models(cfg, 3)
    batch = torch.randint(
        0, cfg.vocab_size, (3, 2, cfg.seq_len + 1), generator=torch.Generator().manual_seed(0)
    )  # (K, B, T + 1)
    fused = bf.FusedGPT(models)
    losses = bf.fused_losses(fused, batch)
    separate = torch.stack([lm_loss(m, batch[k]) for k, m in enumerate(models)])
    assert losses.shape == (3,)
    assert torch.allclose(losses, separate, rtol=1e-5, atol=1e-5)
    # Different models, different losses: the check can fail.
    assert not torch.allclose(separate[0], separate[1])


def test_one_fused_step_trains_each_model_as_its_own_step_would() -> None:
    cfg = bf.model_config(32)
    models = bf.make_models(cfg, 2)
    batch = torch.randint(
        0, cfg.vocab_size, (2, 2, cfg.seq_len + 1), generator=torch.Generator().manual_seed(1)
    )
    fused = bf.FusedGPT(models)
    opt = torch.optim.AdamW(fused.parameters(), lr=1e-2)
    bf.fused_losses(fused, batch).sum().backward()
    opt.step()
    for k, model in enumerate(models):
        own = torch.optim.AdamW(model.parameters(), lr=1e-2)
        lm_loss(model, batch[k]).backward()
        own.step()
        for name, p in model.named_parameters():
            assert torch.allclose(fused.p(name)[k], p, rtol=1e-4, atol=1e-6), name


def test_the_probe_runs_and_writes_its_points(tmp_path: Path) -> None:
    out = tmp_path / "fusion.json"
    assert (
        bf.main(
            [
                "--device",
                "cpu",
                "--steps",
                "1",
                "--d-models",
                "32",
                "--ks",
                "1",
                "2",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    import json

    data = json.loads(out.read_text(encoding="utf-8"))
    assert [(p["d_model"], p["k"]) for p in data["points"]] == [(32, 1), (32, 2)]
    assert all(p["speedup"] > 0 and p["fused_steps_per_s"] > 0 for p in data["points"])
