"""Bits per byte, the unigram baseline and collapse statistics, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from lm import metrics

LN2 = math.log(2)


def test_bits_per_byte_charges_unk_eight_bits_per_replaced_byte() -> None:
    # targets: word(3 bytes), <unk>(4 bytes), word(2 bytes), marker(0 bytes)
    targets = torch.tensor([5, 1, 7, 2])
    nbytes = torch.tensor([3, 4, 2, 0])
    nll = torch.tensor([1.0, 2.0, 3.0, 0.5]) * LN2  # 1, 2, 3, 0.5 bits
    # model bits 6.5 (the marker's bits count; its 0 bytes add nothing) + 8 * 4 for the <unk>
    assert metrics.bits_per_byte(nll, targets, nbytes, unk_id=1) == pytest.approx(38.5 / 9)
    # A lossless tokenizer (no <unk> id) pays the model bits only.
    assert metrics.bits_per_byte(nll, targets, nbytes, unk_id=None) == pytest.approx(6.5 / 9)


def test_bpb_terms_sum_over_batches() -> None:
    targets = torch.tensor([5, 1, 7, 2])
    nbytes = torch.tensor([3, 4, 2, 0])
    nll = torch.tensor([1.0, 2.0, 3.0, 0.5]) * LN2
    a = metrics.bpb_terms(nll[:2], targets[:2], nbytes[:2], 1)
    b = metrics.bpb_terms(nll[2:], targets[2:], nbytes[2:], 1)
    assert a[0] + b[0] == pytest.approx(38.5)
    assert a[1] + b[1] == 9


def test_unigram_entropy_and_gap() -> None:
    h = metrics.unigram_entropy([1, 1, 2, 0])  # p = 1/4, 1/4, 1/2: 1.5 bits
    assert h == pytest.approx(1.5 * LN2)
    assert metrics.unigram_entropy([7]) == 0.0
    assert metrics.unigram_gap(h, 0.5) == pytest.approx(1.5 * LN2 - 0.5)


def test_unigram_bpb_is_the_smoothed_unigram_models_cost() -> None:
    # counts 3, 1 smoothed by 0.5: p = 3.5/5, 1.5/5
    got = metrics.unigram_bpb([3, 1], torch.tensor([0, 1]), torch.tensor([1, 1]), unk_id=None)
    assert got == pytest.approx((-math.log2(0.7) - math.log2(0.3)) / 2)


def test_predicting_the_unigram_everywhere_is_collapse() -> None:
    unigram = torch.tensor([0.5, 0.3, 0.2])
    stats = metrics.collapse_stats(unigram.repeat(4, 1), unigram, k=2)
    assert stats["kl_mean_to_unigram"] == pytest.approx(0.0, abs=1e-6)
    assert stats["mean_kl_to_mean"] == pytest.approx(0.0, abs=1e-6)
    assert stats["top20_overlap"] == 1.0


def test_context_dependent_predictions_are_not_collapse() -> None:
    probs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    unigram = torch.tensor([0.9, 0.1])
    stats = metrics.collapse_stats(probs, unigram)
    # mean m = (0.5, 0.5); each one-hot p_i has KL(p_i || m) = ln 2
    assert stats["mean_kl_to_mean"] == pytest.approx(LN2, rel=1e-6)
    assert stats["kl_mean_to_unigram"] == pytest.approx(
        0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel=1e-6
    )


def test_streaming_accumulator_equals_the_one_shot_value() -> None:
    torch.manual_seed(0)
    logits = torch.randn(12, 30)
    unigram = torch.softmax(torch.randn(30), -1)
    whole = metrics.collapse_stats(torch.softmax(logits, -1), unigram)
    acc = metrics.CollapseStats(30)
    for part in logits.split(5):
        acc.update(part)
    for key, value in acc.result(unigram).items():
        assert value == pytest.approx(whole[key], rel=1e-4, abs=1e-6)


def test_top_k_overlap() -> None:
    p = torch.tensor([0.4, 0.3, 0.2, 0.1])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert metrics.top_k_overlap(p, q, k=2) == 0.0
    assert metrics.top_k_overlap(p, q, k=3) == pytest.approx(2 / 3)
    assert metrics.top_k_overlap(p, p, k=20) == 1.0  # k capped at V
