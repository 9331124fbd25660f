"""µP (``parametrization = "mup"``, lm.model, lm.step): at its base width it trains as SP bit for
bit; away from it each rule scales as Tensor Programs V says; the coordinate check (lm.coord)
finds µP's activations flat across widths where SP's grow; the field travels through a spec to
the trial child.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from lm.config import ModelConfig, TrainConfig
from lm.coord import LAYERS, coord_check, growth, parse_widths, spread, width_config
from lm.errors import SweepsError
from lm.model import GPT
from lm.run_files import read_result, write_config
from lm.step import lm_loss, make_optimizer
from lm.tokens import load_tokens
from lm.train import run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """One thread, here and in the child: tiny models train fastest on one, and equal runs
    then compute in the same order."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWEEPS_NUM_THREADS", "1")
        yield


def model_cfg(**overrides: Any) -> ModelConfig:
    values: dict[str, Any] = {
        "vocab_size": 37,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "d_ff": 64,
        "seq_len": 16,
    }
    return ModelConfig(**{**values, **overrides})


def train_cfg(corpus: Path, **overrides: Any) -> TrainConfig:
    values: dict[str, Any] = {
        "corpus": str(corpus),
        "tokenizer": "byte",
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "d_ff": 64,
        "seq_len": 32,
        "batch_size": 8,
        "lr": 1e-2,
        "warmup_tokens": 512,
        "max_tokens": 4096,
        "eval_every_tokens": 2048,
        "eval_tokens": 512,
        "sample_tokens": 2,
        "device": "cpu",
        "checkpoint_every_tokens": None,
    }
    return TrainConfig.from_dict({**values, **overrides})


def losses(run_dir: Path) -> list[tuple[float, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["train_loss"], r["val_loss"]) for r in rows]


# --- µP at its base width is SP ---------------------------------------------------------------


def _steps(cfg: ModelConfig, n: int) -> tuple[GPT, list[float]]:
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = make_optimizer(model, train_cfg(Path("unused")), torch.device("cpu"))
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model, torch.randint(0, 37, (4, 17), generator=gen))
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return model, out


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_weights": False},
        {"attention": "naive"},
        {"base_d_head": 8},  # the model's own head width: SP's 1/sqrt(d_head)
    ],
)
def test_mup_at_the_base_width_steps_exactly_as_sp(overrides: dict) -> None:
    sp_model, sp_losses = _steps(model_cfg(**overrides), 4)
    mup_model, mup_losses = _steps(model_cfg(parametrization="mup", base_width=32, **overrides), 4)
    assert mup_losses == sp_losses  # bit for bit, not to a tolerance
    for (name, p), q in zip(sp_model.named_parameters(), mup_model.parameters(), strict=True):
        assert torch.equal(p, q), name
    # ...and away from the base width µP is another model (the test can fail).
    _, other = _steps(model_cfg(parametrization="mup", base_width=16, **overrides), 4)
    assert other != sp_losses


def test_mup_at_the_base_width_trains_exactly_as_sp(corpus: Path, tmp_path: Path) -> None:
    load_tokens(corpus, "byte", 260)
    sp = run(train_cfg(corpus), tmp_path / "sp")
    mup = run(train_cfg(corpus, parametrization="mup", base_width=32), tmp_path / "mup")
    assert sp.outcome == mup.outcome == "complete", (sp.reason, mup.reason)
    assert len(losses(tmp_path / "sp")) == 2
    assert losses(tmp_path / "mup") == losses(tmp_path / "sp")  # every evaluation, bit for bit
    assert mup.final_metrics["val_bpb"] == sp.final_metrics["val_bpb"]
    run(train_cfg(corpus, parametrization="mup", base_width=8), tmp_path / "wide")
    assert losses(tmp_path / "wide") != losses(tmp_path / "sp")


# --- the rules away from the base width ---------------------------------------------------------


def test_hidden_init_and_rates_scale_with_width_the_rest_do_not() -> None:
    m = 4  # d_model 128 over base 32
    torch.manual_seed(0)
    sp = GPT(model_cfg(d_model=128, n_heads=4, d_ff=256, tie_weights=False))
    torch.manual_seed(0)
    mup = GPT(
        model_cfg(
            d_model=128,
            n_heads=4,
            d_ff=256,
            tie_weights=False,
            parametrization="mup",
            base_width=32,
        )
    )
    named_sp, named_mup = dict(sp.named_parameters()), dict(mup.named_parameters())
    for name in ("blocks.0.attn.qkv.weight", "blocks.1.ffn.up.weight", "blocks.0.ffn.down.weight"):
        ratio = float(named_sp[name].detach().std() / named_mup[name].detach().std())
        assert ratio == pytest.approx(math.sqrt(m), rel=0.05), name
    for name in ("wte.weight", "wpe.weight", "lm_head.weight", "ln_f.weight"):
        assert torch.equal(named_sp[name], named_mup[name]), name
    assert (sp.readout_mult, mup.readout_mult) == (1.0, 32 / 128)

    cfg = train_cfg(Path("unused"), lr=1e-2, weight_decay=0.1)
    groups = make_optimizer(mup, cfg, torch.device("cpu")).param_groups
    hidden = {id(p) for p in mup.hidden_matrices()}
    assert len(hidden) == 2 * 4  # qkv, proj, up, down per block
    by_kind = {
        "hidden": [g for g in groups if any(id(p) in hidden for p in g["params"])],
        "other": [g for g in groups if not any(id(p) in hidden for p in g["params"])],
    }
    assert len(by_kind["hidden"]) == 1
    (h,) = by_kind["hidden"]
    assert {id(p) for p in h["params"]} == hidden
    assert h["lr"] == pytest.approx(1e-2 / m) and h["weight_decay"] == pytest.approx(0.1 * m)
    assert all(g["lr"] == 1e-2 for g in by_kind["other"])  # embeddings, head, biases, norms
    sp_groups = make_optimizer(sp, cfg, torch.device("cpu")).param_groups
    assert [len(g["params"]) for g in sp_groups] == [
        9,
        20,
    ]  # SP: matrices (8 hidden + head), the rest


def test_the_readout_multiplier_scales_the_logits_not_the_embedding() -> None:
    torch.manual_seed(0)
    base = GPT(model_cfg(d_model=64, n_heads=4))
    torch.manual_seed(0)
    mup = GPT(model_cfg(d_model=64, n_heads=4, parametrization="mup", base_width=16))
    mup.load_state_dict(base.state_dict())
    x = torch.randint(0, 37, (2, 16))
    with torch.no_grad():
        assert torch.allclose(mup(x), base(x) * (16 / 64), atol=1e-6)
    # Tied: the readout is the embedding matrix (mup's MuSharedReadout), one tensor.
    assert mup.lm_head.weight is mup.wte.weight


@pytest.mark.parametrize("attention", ["sdpa", "naive"])
def test_attention_is_one_over_d_head_from_the_base_head_width(attention: str) -> None:
    # d_head 16 against a base head width of 4: logits x sqrt(4) / 16 instead of / sqrt(16).
    cfg = model_cfg(d_model=64, n_heads=4, parametrization="mup", base_width=64, base_d_head=4)
    assert cfg.attention_mult == pytest.approx(0.5)
    torch.manual_seed(0)
    mup = GPT(ModelConfig(**{**cfg.__dict__, "attention": attention})).eval()
    sp = GPT(model_cfg(d_model=64, n_heads=4, attention=attention)).eval()
    sp.load_state_dict(mup.state_dict())
    with torch.no_grad():  # the same weights: only the attention scale differs
        for block in sp.blocks:  # SP with q halved computes µP's logits
            block.attn.qkv.weight[:64] *= 0.5
            block.attn.qkv.bias[:64] *= 0.5
    x = torch.randint(0, 37, (2, 16))
    with torch.no_grad():
        assert torch.allclose(mup(x), sp(x), atol=1e-5)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(SweepsError, match=r"parametrization.*'mu'"):
        model_cfg(parametrization="mu")
    with pytest.raises(SweepsError, match="base_width"):
        model_cfg(parametrization="mup", base_width=0)
    with pytest.raises(SweepsError, match="base_d_head"):
        train_cfg(Path("c"), base_d_head=0)


def test_an_sp_runs_hashes_ignore_the_mup_fields() -> None:
    sp = train_cfg(Path("c"))
    assert train_cfg(Path("c"), base_width=64).fingerprint() == sp.fingerprint()
    assert train_cfg(Path("c"), base_width=64).resume_fingerprint() == sp.resume_fingerprint()
    assert "parametrization" not in sp.computation()
    mup = train_cfg(Path("c"), parametrization="mup", base_width=32)
    assert mup.fingerprint() != sp.fingerprint()
    assert mup.computation()["base_width"] == 32


@pytest.mark.parametrize("attention", ["sdpa", "naive"])
def test_mup_adds_no_saved_tensor_and_no_flop(attention: str) -> None:
    """lm.memory and lm.flops know nothing of the parametrization: µP's multipliers must keep
    what backward holds (bytes of the saved tensors) and torch's matmul FLOPs as SP's."""
    from torch.utils.flop_counter import FlopCounterMode

    def measure(cfg: ModelConfig) -> tuple[int, int]:
        torch.manual_seed(0)
        model = GPT(cfg)
        batch = torch.randint(0, 37, (2, 17))
        saved = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved[0] += t.numel() * t.element_size()
            return t

        with FlopCounterMode(display=False) as counter:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = lm_loss(model, batch)
            loss.backward()
        return saved[0], counter.get_total_flops()

    shape = {"d_model": 64, "n_heads": 8, "attention": attention, "tie_weights": False}
    sp = measure(model_cfg(**shape))
    mup = measure(model_cfg(**shape, parametrization="mup", base_width=16, base_d_head=4))
    assert mup == sp and sp[0] > 0


# --- the coordinate check --------------------------------------------------------------------

#: Measured (lr 1e-3, 1e-2, 3e-2; seeds 0-2; widths 32 to 256, d_head 8, 5 steps): µP's spread
#: (max / min over widths) at most 1.5 for every layer; at lr 1e-2 SP's logits grow 4.5 to 5x,
#: its attention output 22 to 29x and its updates 7.5x from width 32 to 256.
MUP_SPREAD = 2.0
SP_GROWTH = {"logits": 3.0, "attention": 10.0, "update": 4.0}


def test_the_coordinate_check_is_flat_under_mup_and_grows_under_sp(corpus: Path) -> None:
    cache = load_tokens(corpus, "byte", 260)
    cfg = train_cfg(corpus, d_model=32, n_heads=4, d_ff=128, base_width=32)
    rows = coord_check(cfg, cache.train, 260, (32, 64, 128, 256), steps=5)
    assert {(r.parametrization, r.width, r.step, r.layer) for r in rows} == {
        (p, w, s, layer)
        for p in ("sp", "mup")
        for w in (32, 64, 128, 256)
        for s in range(1, 6)
        for layer in LAYERS
    }
    for layer in LAYERS:
        assert spread(rows, "mup", layer, 5) < MUP_SPREAD, layer
    for layer, factor in SP_GROWTH.items():
        assert growth(rows, "sp", layer, 5) > factor, layer
    # At the base width both parametrizations are one model.
    at_base = {(r.step, r.layer): r.rms for r in rows if r.width == 32}
    assert all(r.rms == at_base[(r.step, r.layer)] for r in rows if r.width == 32)


def test_widths_keep_d_head_and_the_ffn_ratio() -> None:
    cfg = train_cfg(Path("c"), d_model=32, n_heads=4, d_ff=128)
    wide = width_config(cfg, 256, "mup")
    assert (wide.d_model, wide.n_heads, wide.d_ff, wide.parametrization) == (256, 32, 1024, "mup")
    with pytest.raises(SweepsError, match="multiple of d_head=8"):
        width_config(cfg, 60, "sp")
    assert parse_widths("32, 64,128") == (32, 64, 128)
    for bad in ("32", "64,32", "a,b", "0,32"):
        with pytest.raises(SweepsError, match="--widths"):
            parse_widths(bad)


# --- through a spec to the child ---------------------------------------------------------------


def test_the_parametrization_is_in_the_trial_config_and_reaches_the_child(
    corpus: Path, tmp_path: Path
) -> None:
    from sweeps.space import trial_config
    from sweeps.spec import load_spec

    fixed = {
        "tokenizer": "byte",
        "d_model": 32,
        "n_heads": 4,
        "d_ff": 64,
        "seq_len": 32,
        "batch_size": 8,
        "lr": 1e-2,
        "warmup_tokens": 512,
        "max_tokens": 4096,
        "eval_every_tokens": 2048,
        "eval_tokens": 512,
        "sample_tokens": 2,
        "device": "cpu",
        "parametrization": "mup",
        "base_width": 8,
    }
    lines = [
        "[study]",
        'name = "mup"',
        "n_trials = 1",
        "[corpus]",
        f"dir = {json.dumps(str(corpus))}",
        "[fixed]",
        *(f"{k} = {json.dumps(v)}" for k, v in fixed.items() if k != "lr"),
        "[space]",
        "lr = [0.01]",
    ]
    path = tmp_path / "mup.toml"
    path.write_text("\n".join(lines) + "\n")
    cfg = trial_config(load_spec(path), {"lr": 0.01})
    assert (cfg.parametrization, cfg.base_width) == ("mup", 8)
    child_dir = tmp_path / "child"
    write_config(child_dir, cfg)  # what the runner writes for a trial
    assert json.loads((child_dir / "config.json").read_text())["parametrization"] == "mup"
    proc = subprocess.run(
        [sys.executable, "-m", "lm.train", str(child_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert read_result(child_dir).outcome == "complete"
    # The child trained µP: what this process trains from the same config, not SP's losses.
    run(cfg, tmp_path / "here")
    sp = run(train_cfg(corpus), tmp_path / "sp")
    assert sp.outcome == "complete"
    assert losses(child_dir) == losses(tmp_path / "here") != losses(tmp_path / "sp")
