"""The vocabulary chart's x is the vocabulary the model trained with: a word tokenizer on a small
corpus can hold fewer words than the trial asked for (``results.vocab_actual``, read from the
parameters the child recorded), and a trial that recorded none keeps its requested size."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from sweeps import results
from sweeps import storage as st
from sweeps.charts import vocab

NAN = math.nan


def _frame(rows: list[dict]) -> pd.DataFrame:
    columns = results._columns({})
    return pd.DataFrame([{c: r.get(c, NAN) for c in columns} | r for r in rows], columns=columns)


def test_the_real_vocabulary_is_read_from_the_recorded_embedding() -> None:
    config = {"d_model": 64, "vocab_size": 4096}
    assert results.vocab_actual({"embedding": 1000 * 64, "total": 9}, config) == 1000
    assert results.vocab_actual({"total": 9}, config) is None  # the report's fake studies
    assert results.vocab_actual(None, config) is None  # never launched
    assert results.vocab_actual({"embedding": 1000 * 64 + 1}, config) is None
    assert results.vocab_actual({"embedding": 640}, {}) is None
    assert results.vocab_actual({"embedding": True}, {"d_model": 1}) is None


def test_the_study_frame_has_the_trained_vocabulary(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v.db'}"
    study = optuna.create_study(study_name="v", storage=st.open_storage(url))
    dist = {"vocab_size": IntDistribution(256, 8192)}
    for requested, attrs in (
        (
            4096,
            {
                "config": {"d_model": 32, "vocab_size": 4096},
                "params": {"embedding": 1733 * 32, "total": 10**5},
            },
        ),
        (512, {"outcome": "predicted_oom"}),
    ):
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=1.0,
                params={"vocab_size": requested},
                distributions=dist,
                user_attrs=attrs,
            )
        )
    frame = results.study_frame(url, "v")
    assert frame["vocab_size"].tolist() == [4096, 512]
    assert frame["vocab_actual"].tolist()[0] == 1733 and pd.isna(frame["vocab_actual"][1])
    assert str(frame["vocab_actual"].dtype) == "Int64"


def test_the_chart_plots_the_real_size_and_falls_back_to_the_requested_one() -> None:
    frame = _frame(
        [
            # asked for 4096 words, the corpus had 1733: plotted at 1733
            {
                "number": 0,
                "outcome": "complete",
                "tokenizer": "word",
                "vocab_size": 4096,
                "vocab_actual": 1733,
                "val_bpb": 2.0,
                "val_loss": 3.0,
                "bytes_per_token": 5.0,
                "unk_rate": 0.01,
            },
            # no recorded model: its requested size
            {
                "number": 1,
                "outcome": "complete",
                "tokenizer": "bpe",
                "vocab_size": 1024,
                "val_bpb": 1.8,
                "val_loss": 3.5,
                "bytes_per_token": 3.0,
                "unk_rate": 0.0,
            },
        ]
    )
    frame["vocab_actual"] = frame["vocab_actual"].astype("Int64")
    assert vocab.vocab_sizes(frame).tolist() == [1733.0, 1024.0]
    points, best, tokens = vocab.data(frame)
    assert points[["number", "vocab_size"]].values.tolist() == [[0, 1733.0], [1, 1024.0]]
    assert best[["tokenizer", "vocab_size"]].values.tolist() == [["bpe", 1024.0], ["word", 1733.0]]
    assert tokens[["tokenizer", "vocab_size"]].values.tolist() == [
        ["bpe", 1024.0],
        ["word", 1733.0],
    ]
    # a frame from before the column existed: the requested sizes
    old = frame.drop(columns="vocab_actual")
    assert vocab.vocab_sizes(old).tolist() == [4096.0, 1024.0]
