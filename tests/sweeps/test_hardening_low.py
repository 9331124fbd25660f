"""Issue 34, item 10 (low): an existing ``--out`` of ``schema``, a cooldown read that can never be
taken, queued trials shown without their parameters, and study names without a did-you-mean.
(``effects --metric number`` and identical paired differences: ``test_cli_effects.py``,
``test_fair_arms.py``.)"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import storage as st
from sweeps import study as service
from tests.sweeps.cli import assert_user_error, sweeps


def test_schema_out_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "spec.schema.json"
    out.write_text("mine")
    assert_user_error(
        sweeps("schema", "--out", str(out), cwd=tmp_path), "already exists", "--force"
    )
    assert out.read_text() == "mine"
    assert sweeps("schema", "--out", str(out), "--force", cwd=tmp_path).returncode == 0
    assert out.read_text().startswith("{")


def test_a_cooldown_read_in_the_last_step_is_refused() -> None:
    # 8 x 64 = 512 tokens a step: 19,999 is read at 20,480, past the run's 20,000.
    with pytest.raises(
        SweepsError,
        match=r"cooldown_reads 19,999 falls in the last optimizer "
        r"step.*use points below 19,968",
    ):
        TrainConfig(
            corpus="c",
            lr_schedule="wsd",
            seq_len=64,
            batch_size=8,
            max_tokens=20_000,
            cooldown_reads=(10_000, 19_999),
        )
    assert TrainConfig(
        corpus="c",
        lr_schedule="wsd",
        seq_len=64,
        batch_size=8,
        max_tokens=20_000,
        cooldown_reads=(19_968,),
    ).cooldown_reads == (19_968,)


def test_queued_trials_show_what_they_will_be_asked_with(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    study = optuna.create_study(study_name="q", storage=st.open_storage(url))
    study.enqueue_trial({"d_ff": 64, "lr": 0.01})
    [row] = service.trial_rows(study)
    assert row["state"] == "WAITING" and row["params"] == {"d_ff": 64, "lr": 0.01}


def test_a_misspelt_study_name_gets_a_did_you_mean(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    optuna.create_study(study_name="ds_vocab", storage=st.open_storage(url))
    assert_user_error(sweeps("trials", "ds_vocb", "--storage", url), "did you mean 'ds_vocab'")
    assert_user_error(
        sweeps("report", "ds_vocb", "--storage", url, "--out", str(tmp_path / "r.html")),
        "did you mean 'ds_vocab'",
    )
