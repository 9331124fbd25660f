"""``top_tokens``: the corpus-vs-model frequencies of the likeliest tokens, in every evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lm import metrics
from lm.config import TrainConfig
from lm.corpus import prepare_synthetic
from lm.run_files import METRIC_KEYS
from lm.train import run


def test_top_tokens_is_the_union_of_both_top_k_corpus_order_first() -> None:
    unigram = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0])
    mean = torch.tensor([0.0, 0.1, 0.0, 0.2, 0.7])
    got = metrics.top_tokens(mean, unigram, ["a", "b", "c", "d", "e"], k=2)
    # corpus top 2: a, b; model top 2: e, d -> union ordered by corpus probability
    assert got == {
        "tokens": ["a", "b", "d", "e"],
        "corpus": [0.4, 0.3, 0.1, 0.0],
        "model": [0.0, 0.1, 0.2, 0.7],
    }


def test_a_collapsed_model_has_the_corpus_ranking() -> None:
    unigram = torch.softmax(torch.randn(100, generator=torch.Generator().manual_seed(0)), -1)
    acc = metrics.CollapseStats(100)
    acc.update(torch.log(unigram).repeat(8, 1))  # every prediction is the unigram
    got = metrics.top_tokens(acc.mean(), unigram, [f"t{i}" for i in range(100)])
    assert len(got["tokens"]) == 20  # same top 20 on both sides
    assert got["model"] == pytest.approx(got["corpus"], rel=1e-4)
    assert got["corpus"] == sorted(got["corpus"], reverse=True)


def test_every_evaluation_records_top_tokens(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    prepare_synthetic(corpus, size_bytes=200_000, seed=0)
    cfg = TrainConfig.from_dict(
        {
            "corpus": str(corpus),
            "tokenizer": "word",
            "vocab_size": 300,
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "d_ff": 64,
            "seq_len": 32,
            "batch_size": 8,
            "max_tokens": 512,
            "eval_every_tokens": 256,
            "eval_tokens": 512,
            "device": "cpu",
            "sample_tokens": 2,
            "warmup_tokens": 0,
        }
    )
    run(cfg, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and "top_tokens" in METRIC_KEYS
    for row in rows:
        top = row["top_tokens"]
        assert 20 <= len(top["tokens"]) <= 40
        assert len(top["corpus"]) == len(top["model"]) == len(top["tokens"])
        assert all(0.0 <= p <= 1.0 for p in top["corpus"] + top["model"])
        assert top["corpus"] == sorted(top["corpus"], reverse=True)
    # a 300-word vocabulary: <unk> is the most frequent target, shown by its display name
    assert rows[0]["top_tokens"]["tokens"][0] == "<unk>"
