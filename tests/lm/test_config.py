"""TrainConfig/ModelConfig validation: every bad value is a SweepsError naming field and value."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lm.config import ModelConfig, TrainConfig, param_breakdown
from lm.errors import SweepsError

BASE = {"corpus": "data/c", "tokenizer": "bpe", "vocab_size": 512}


def make(**overrides: object) -> TrainConfig:
    return TrainConfig.from_dict({**BASE, **overrides})


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"d_model": 100, "n_heads": 3}, ["d_model=100", "n_heads=3", "divisible"]),
        ({"d_ff": 0}, ["d_ff must be >= 1, got d_ff=0"]),
        ({"seq_len": 1}, ["seq_len", "seq_len=1"]),
        ({"batch_size": 0}, ["batch_size", "batch_size=0"]),
        ({"grad_accum": 0}, ["grad_accum", "grad_accum=0"]),
        ({"lr": 0.0}, ["lr must be > 0", "lr=0.0"]),
        ({"lr": -1e-3}, ["lr", "lr=-0.001"]),
        ({"precision": "fp8"}, ["precision", "'fp8'"]),
        ({"attention": "flash"}, ["attention", "'flash'"]),
        ({"precision": "fp16", "device": "cpu"}, ["fp16", "device='cpu'"]),
        ({"device": "tpu"}, ["device", "'tpu'"]),
        ({"d_ff": True}, ["d_ff must be an integer", "d_ff=True"]),
        ({"dropout": 1.0}, ["dropout", "dropout=1.0"]),
        ({"tokenizer": "char"}, ["tokenizer", "'char'"]),
        ({"max_wall_s": 0}, ["max_wall_s", "max_wall_s=0"]),
        ({"sample_prompts": "<Q>hi"}, ["sample_prompts"]),
        ({"lr_schedule": "step"}, ["lr_schedule", "'step'"]),
        ({"decay_fraction": 1.0}, ["decay_fraction must be < 1", "decay_fraction=1.0"]),
        ({"decay_fraction": 0}, ["decay_fraction must be > 0"]),
        ({"decay_shape": "sqrt"}, ["decay_shape", "'sqrt'"]),
        ({"cooldown_fraction": 0.0}, ["cooldown_fraction must be > 0"]),
        ({"lr_schedule": "wsd", "cooldown_reads": [0]}, ["cooldown_reads must be >= 1"]),
        (
            {"lr_schedule": "wsd", "cooldown_reads": [2_000_000]},
            ["cooldown_reads must be below max_tokens=1,000,000", "[2000000]"],
        ),
        (
            {"lr_schedule": "wsd", "cooldown_reads": [300, 200]},
            ["cooldown_reads must be increasing", "[300, 200]"],
        ),
        ({"lr_schedule": "wsd", "cooldown_reads": 100}, ["cooldown_reads must be a list"]),
        (
            {"cooldown_reads": [1000]},
            ["cooldown_reads needs lr_schedule='wsd'", "lr_schedule='cosine'", "[1000]"],
        ),
    ],
)
def test_bad_values_name_field_and_value(overrides: dict, expected: list[str]) -> None:
    with pytest.raises(SweepsError) as info:
        make(**overrides)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(SweepsError, match=r"unknown config field 'dff'.*did you mean 'd_ff'"):
        TrainConfig.from_dict({**BASE, "dff": 512})


def test_missing_corpus_is_named() -> None:
    with pytest.raises(SweepsError, match="corpus"):
        TrainConfig.from_dict({"tokenizer": "bpe"})


def test_tokenizer_rules_are_checked_up_front() -> None:
    with pytest.raises(SweepsError, match="vocab_size=300"):
        make(tokenizer="byte", vocab_size=300)
    with pytest.raises(SweepsError, match="vocab_size=3"):
        make(tokenizer="word", vocab_size=3)


def test_d_ff_one_is_legal_and_dict_round_trips_through_json() -> None:
    cfg = make(d_ff=1, lr=1, max_wall_s=30, sample_prompts=["<Q>a", "<Q>b"])
    assert cfg.d_ff == 1
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.sample_prompts == ("<Q>a", "<Q>b")
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert again.fingerprint() == cfg.fingerprint()


def test_fingerprint_follows_the_weights_not_the_schedule() -> None:
    cfg = make()
    assert make(max_tokens=123, lr=0.5, device="cpu").fingerprint() == cfg.fingerprint()
    assert make(d_ff=256).fingerprint() != cfg.fingerprint()
    assert make(vocab_size=1024).fingerprint() != cfg.fingerprint()


def test_model_config_and_tokens_per_step() -> None:
    cfg = make(d_model=64, n_heads=2, d_ff=96, seq_len=32, batch_size=4, grad_accum=3)
    m = cfg.model_config()
    assert isinstance(m, ModelConfig)
    assert (m.vocab_size, m.d_model, m.n_heads, m.d_ff, m.seq_len) == (512, 64, 2, 96, 32)
    assert cfg.model_config(vocab_size=300).vocab_size == 300
    assert cfg.tokens_per_step == 4 * 3 * 32


def test_model_config_validates_too() -> None:
    with pytest.raises(SweepsError, match="d_ff=0"):
        ModelConfig(vocab_size=10, d_ff=0)


def test_ffn_breakdown_by_arithmetic() -> None:
    wide = param_breakdown(ModelConfig(vocab_size=100, d_model=200, n_heads=4, d_ff=800))
    assert wide["ffn_per_layer"] == 321_000
    narrow = param_breakdown(ModelConfig(vocab_size=100, d_model=200, n_heads=4, d_ff=1))
    assert narrow["ffn_per_layer"] == 601


def test_config_module_imports_no_torch() -> None:
    code = "import sys, lm.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_cooldown_reads_round_trip_and_the_read_follows_the_decay_by_default() -> None:
    cfg = make(lr_schedule="wsd", cooldown_reads=[1_000, 5_000], decay_fraction=0.2)
    assert cfg.cooldown_reads == (1_000, 5_000)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.read_cooldown_fraction == pytest.approx(0.25)  # 0.2 / (1 - 0.2)
    assert make(lr_schedule="wsd", cooldown_fraction=0.1).read_cooldown_fraction == 0.1


def test_the_schedule_at_its_defaults_keeps_the_resume_fingerprint() -> None:
    """A resume checkpoint written before the schedule fields existed still continues: at their
    defaults they are not part of the computation; set, they are."""
    cfg = make()
    assert not {"lr_schedule", "decay_fraction", "cooldown_reads"} & set(cfg.computation())
    wsd = make(lr_schedule="wsd")
    assert wsd.computation()["lr_schedule"] == "wsd"
    assert wsd.resume_fingerprint() != cfg.resume_fingerprint()
    assert (
        make(lr_schedule="wsd", decay_shape="linear").resume_fingerprint()
        != wsd.resume_fingerprint()
    )
    assert (
        make(lr_schedule="wsd", cooldown_reads=[10]).resume_fingerprint()
        != wsd.resume_fingerprint()
    )


def test_a_train_config_builds_the_default_model_by_default() -> None:
    # ModelConfig's defaults are the one place: a TrainConfig left at its defaults gives the
    # model a bare ModelConfig would be, field for field (a default set on one side only, or a
    # model field TrainConfig lacks, fails here).
    import dataclasses

    train = TrainConfig.from_dict({"corpus": "data/c"})
    assert train.model_config(vocab_size=512) == ModelConfig(vocab_size=512)
    train_fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for f in dataclasses.fields(ModelConfig):
        if f.name != "vocab_size":
            assert train_fields[f.name].default == f.default, f.name
