"""``vocab_size``'s default follows the tokenizer everywhere (issue 34, item 7): ``tokenizer =
"byte"`` without ``vocab_size`` in a spec was refused as "vocab_size=4096 does not fit the byte
tokenizer ... use --vocab-size 260", though the README gives the default as "4096; byte: 260"
and ``sweeps estimate --tokenizer byte`` accepted it. One rule (``lm.config.default_vocab_size``)
for configs, specs and flags; a message names the spec key in a spec and the flag on the command
line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps.space import trial_config
from sweeps.spec import read_spec
from tests.sweeps.cli import sweeps_here
from tests.sweeps.helpers import spec_dict, toml_text


@pytest.mark.parametrize(("tokenizer", "expected"), [("byte", 260), ("bpe", 4096), ("word", 4096)])
def test_a_config_without_vocab_size_follows_its_tokenizer(tokenizer: str, expected: int) -> None:
    built = TrainConfig(corpus="c", tokenizer=tokenizer)  # type: ignore[arg-type]
    read = TrainConfig.from_dict({"corpus": "c", "tokenizer": tokenizer})
    assert built.vocab_size == read.vocab_size == expected
    assert TrainConfig.from_dict(read.to_dict()) == read  # written out resolved, read back alike
    assert TrainConfig(corpus="c", tokenizer="word", vocab_size=300).vocab_size == 300


def _byte_spec(corpus: Path, **fixed: Any) -> dict[str, Any]:
    return spec_dict(
        "bytes", corpus, fixed={"tokenizer": "byte", **fixed}, space={"d_ff": {"choices": [32, 64]}}
    )


def test_a_byte_spec_needs_no_vocab_size(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = read_spec(_byte_spec(corpus))
    assert trial_config(spec, {"d_ff": 64}).vocab_size == 260
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(toml_text(_byte_spec(corpus)))
    for args in (
        ["run", "spec.toml", "--dry-run"],
        ["estimate", "spec.toml"],
        ["estimate", "--tokenizer", "byte"],
    ):
        proc = sweeps_here(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert "invalid" not in proc.stdout, proc.stdout


def test_each_trial_follows_its_own_tokenizer(corpus: Path) -> None:
    spec = read_spec(spec_dict("kinds", corpus, space={"tokenizer": {"choices": ["bpe", "byte"]}}))
    assert trial_config(spec, {"tokenizer": "bpe"}).vocab_size == 4096
    assert trial_config(spec, {"tokenizer": "byte"}).vocab_size == 260
    fixed = read_spec(
        spec_dict(
            "kinds",
            corpus,
            fixed={"vocab_size": 300},
            space={"tokenizer": {"choices": ["bpe", "word"]}},
        )
    )
    assert trial_config(fixed, {"tokenizer": "bpe"}).vocab_size == 300  # what the spec says


def test_estimate_spec_with_a_tokenizer_flag_follows_it(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(
        toml_text(
            spec_dict(
                "flag", corpus, space={"d_ff": {"choices": [32, 64]}}, fixed={"tokenizer": "bpe"}
            )
        )
    )
    proc = sweeps_here("estimate", "spec.toml", "--tokenizer", "byte", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"valid": false' not in proc.stdout, proc.stdout


@pytest.mark.parametrize(
    ("fixed", "says"),
    [
        ({"tokenizer": "byte", "vocab_size": 4096}, "vocab_size=4096 does not fit the byte"),
        ({"tokenizer": "bpe", "vocab_size": 256}, "vocab_size=256 is too small for the bpe"),
    ],
)
def test_a_spec_error_names_the_spec_key(corpus: Path, fixed: dict[str, Any], says: str) -> None:
    with pytest.raises(SweepsError) as err:
        read_spec(spec_dict("keys", corpus, fixed=fixed, space={"d_ff": {"choices": [32]}}))
    message = str(err.value)
    assert "fixed.vocab_size" in message and says in message, message
    assert "use vocab_size = 260" in message and "--vocab-size" not in message, message


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--tokenizer", "byte", "--vocab-size", "4096"],
            "--vocab-size 4096 does not fit the byte",
        ),
        (
            ["--tokenizer", "bpe", "--vocab-size", "256"],
            "--vocab-size 256 is too small for the bpe",
        ),
    ],
)
def test_a_flag_error_names_the_flag(args: list[str], says: str) -> None:
    proc = sweeps_here("estimate", *args)
    assert proc.returncode == 2
    assert says in proc.stderr and "use --vocab-size 260" in proc.stderr, proc.stderr
    assert "vocab_size" not in proc.stderr, proc.stderr
