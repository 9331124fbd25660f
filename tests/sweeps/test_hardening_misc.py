"""Issue 24, item 14: a libpq key-value ``--storage`` string was echoed with its password;
``device = "cuda:7"`` on a host without it was refused by ``run`` but accepted by ``--dry-run``;
``copy tiny TINY`` was allowed though run dirs collide on a case-insensitive file system."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from lm import host
from lm.errors import SweepsError
from sweeps import plan
from sweeps.spec import read_spec
from sweeps.storage import mask_url
from tests.shared import shared_corpus
from tests.sweeps.cli import assert_user_error, sweeps
from tests.sweeps.helpers import spec_dict


@pytest.mark.parametrize(
    "text",
    [
        "host=127.0.0.1 password=s3cret dbname=x",
        "host=h password='s3cret with space' user=u",
        "PASSWORD = s3cret",
    ],
)
def test_a_key_value_connection_string_has_its_password_hidden(text: str) -> None:
    assert "s3cret" not in mask_url(text) and "***" in mask_url(text)


def test_the_cli_never_echoes_a_key_value_password(tmp_path: Path) -> None:
    proc = sweeps("status", "--storage", "host=127.0.0.1 password=s3cret dbname=x")
    assert_user_error(proc, "password=***")
    assert "s3cret" not in proc.stderr + proc.stdout


def test_the_dry_run_refuses_a_gpu_this_host_lacks(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spec = read_spec(spec_dict("gpu", shared_corpus(tmp_path_factory), fixed={"device": "cuda:7"}))
    monkeypatch.setattr(host, "visible_gpus", lambda: ["0"])
    with pytest.raises(SweepsError, match="cuda:7"):
        plan.dry_run(spec, "sqlite://", 1, None)
    monkeypatch.setattr(host, "visible_gpus", lambda: [])  # a laptop: planned for a GPU host
    plan.dry_run(spec, "sqlite://", 1, None)


def test_copy_and_rename_refuse_a_name_that_differs_only_in_case(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    optuna.create_study(storage=url, study_name="tiny")
    optuna.create_study(storage=url, study_name="other")
    assert_user_error(sweeps("copy", "tiny", "TINY", "--storage", url), "only in case")
    assert_user_error(sweeps("rename", "other", "Tiny", "--storage", url), "only in case")
    proc = sweeps("rename", "tiny", "TINY", "--storage", url)  # itself: its own dir
    assert proc.returncode == 0, proc.stderr
