"""``sweeps run/worker/status/trials`` as a user runs them: malformed specs, the dry run, a study
end to end, and Optuna's own CLI reading the same database."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps import cli
from tests.sweeps.helpers import spec_dict, sweeps_run, toml_text


def main(*args: str) -> int:
    """``sweeps ARGS`` in this process (``cli.main``: one line and exit 2 for a SweepsError)."""
    old = sys.argv
    sys.argv = ["sweeps", *args]
    try:
        cli.main()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        sys.argv = old
    return 0


GOOD = """
[study]
n_trials = 2
{study}
[corpus]
dir = "{corpus_dir}"
[fixed]
device = "{device}"
d_model = 16
n_heads = 2
{fixed}
[space.d_ff]
{d_ff}
{extra}
"""

# (what is wrong, spec pieces, words the one-line error must contain)
MALFORMED = [
    ("unknown key", {"study": "samplr = 'tpe'"}, ["study.samplr", "sampler"]),
    ("wrong type", {"study": "seed = 'zero'"}, ["study.seed"]),
    ("empty space", {"d_ff": "", "extra": ""}, ["space.d_ff"]),
    ("low > high", {"d_ff": "type = 'int'\nlow = 512\nhigh = 64"}, ["low", "high"]),
    ("bad condition", {"d_ff": "choices = [64]\nwhen = \"tokenizer === 'word'\""}, ["when"]),
    (
        "condition on a typo",
        {"d_ff": "choices = [64]\nwhen = \"tokenizr == 'word'\""},
        ["tokenizr"],
    ),
    ("impossible fixed", {"fixed": "n_layers = 0"}, ["n_layers"]),
    ("unknown attention", {"fixed": "attention = 'flash'"}, ["attention", "flash"]),
    ("unknown sampler", {"study": "sampler = 'bayes'"}, ["bayes"]),
    ("unknown pruner", {"study": "pruner = 'sometimes'"}, ["sometimes"]),
    ("unknown metric", {"study": "objectives = ['val_acc']"}, ["val_acc"]),
    (
        "pruner with two objectives",
        {"study": "objectives = ['val_bpb', 'peak_mem']\npruner = 'median'"},
        ["pruner"],
    ),
    ("not a field", {"extra": "[space.d_fff]\nchoices = [1]"}, ["d_fff"]),
    ("enqueued value outside the space", {"extra": "[[enqueue]]\nd_ff = 3"}, ["enqueue[0]"]),
    ("missing corpus dir", {"corpus_dir": "/nonexistent/corpus"}, ["corpus.dir"]),
    ("storage in a missing directory", {"study": "storage = 'sqlite:///nodir/x.db'"}, ["nodir"]),
    (
        "unreachable server",
        {"study": "storage = 'postgresql://alice:hunter2@127.0.0.1:1/db'"},
        ["alice:***@127.0.0.1:1", "cannot open storage"],
    ),
    ("not TOML", {"extra": "[space.d_ff"}, ["not valid TOML"]),
    ("negative min_lr_sum", {"extra": "[limits.collapse]\nmin_lr_sum = -1"}, ["min_lr_sum", "-1"]),
    # Gaps that used to pass --dry-run and crash every trial, or print a traceback after the
    # database existed (the hardening pass):
    (
        "ordering against a string",
        {"d_ff": "choices = [32]\nwhen = \"d_model > 'abc'\""},
        ["space.d_ff.when", "'abc' is not a number"],
    ),
    (
        "ordering a string field",
        {"d_ff": 'choices = [32]\nwhen = "tokenizer > 3"'},
        ["tokenizer is not a number"],
    ),
    ("study seed beyond 2**32", {"study": "seed = 4294967296"}, ["study.seed", "4294967295"]),
    ("fixed seed beyond 2**64", {"fixed": "seed = 18446744073709551616"}, ["fixed.seed"]),
    (
        "infinite bound",
        {"d_ff": "type = 'float'\nlow = 1.0\nhigh = inf"},
        ["space.d_ff.high", "finite"],
    ),
    (
        "a name no directory can have",
        {"study": "name = '" + "n" * 600 + "'"},
        ["study.name", "600 characters"],
    ),
    (
        "800 nested nots",
        {"d_ff": 'choices = [32]\nwhen = "' + "not " * 800 + 'true"'},
        ["nested more than"],
    ),
    (
        "a GPU this host does not have",
        {"fixed": "precision = 'fp32'", "device": "cuda:7"},
        ["cuda:7", "visible GPU"],
    ),
]


def spec_text(corpus: Path, **parts: str) -> str:
    if "name =" not in parts.get("study", ""):
        parts = {**parts, "study": 'name = "good"\n' + parts.get("study", "")}
    values = {
        "study": "",
        "corpus_dir": str(corpus),
        "device": "cpu",
        "fixed": "",
        "d_ff": "choices = [32, 64]",
        "extra": "",
    }
    values.update(parts)
    return GOOD.format(**values)


@pytest.mark.parametrize(("what", "parts", "needles"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_spec_is_one_line_and_creates_nothing(
    what: str,
    parts: dict[str, str],
    needles: list[str],
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPS_STORAGE", raising=False)
    (tmp_path / "spec.toml").write_text(spec_text(corpus, **parts))
    assert main("run", "spec.toml") == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "hunter2" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]  # no sweeps.db, no runs


def test_the_good_spec_is_good(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The malformed specs differ from this one by the one thing each test names."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(spec_text(corpus))
    assert main("run", "spec.toml", "--dry-run") == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workers", "0"], "--workers"),
        (["--n-trials", "0"], "--n-trials"),
        (["--launcher", "threads"], "--launcher"),
        (["--heartbeat", "10", "--grace", "5"], "--grace"),
        (["--storage", "nonsense"], "not a database URL"),
    ],
)
def test_bad_options(
    args: list[str],
    needle: str,
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(spec_text(corpus))
    assert main("run", "spec.toml", *args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "sweeps.db").exists()


def test_read_commands_never_create_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPS_STORAGE", raising=False)
    for args in (["status"], ["trials", "x"], ["worker", "x"]):
        assert main(*args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "no database at sqlite:///sweeps.db" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_dry_run_prints_the_plan_and_writes_nothing(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    data = spec_dict(
        "plan",
        corpus,
        space={
            "tokenizer": {"choices": ["word", "bpe"]},
            "vocab_size": {"type": "int", "low": 300, "high": 8000, "log": True},
            "batch_size": {"choices": [8, 64]},
        },
        study={"n_trials": 7, "storage": "postgresql://bob:pw@127.0.0.1:1/x"},
        limits={"memory_budget": "1GiB"},
    )
    (tmp_path / "plan.toml").write_text(toml_text(data))
    assert main("run", "plan.toml", "--dry-run", "--workers", "2") == 0
    out = capsys.readouterr().out
    for needle in (
        "plan: plan.toml",
        "bob:***@127.0.0.1:1",
        "not opened",
        "trials",
        "7",
        "1.0 GiB per trial",
        "vocab_size",
        "300 .. 8000 log",
        "word, bpe",
        "largest point",
        "vocab_size=8000, batch_size=64",
        "predicted peak",
        "against the budget",
    ):
        assert needle in out, (needle, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]


def test_dry_run_warns_of_a_budget_shorter_than_the_eval_interval(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    data = spec_dict("short", corpus, fixed={"max_tokens": 1000})  # eval every 2,000
    (tmp_path / "short.toml").write_text(toml_text(data))
    assert main("run", "short.toml", "--dry-run") == 0
    err = capsys.readouterr().err
    assert (
        "warning: 4 of 4 points of the grid, e.g. eval_every_tokens 2,000 >= max_tokens "
        "1,000" in err
    ), err
    assert "warmup_tokens" not in err  # 500 < 1,000


def read_back(cwd: Path) -> tuple[str, str, list[dict]]:
    """``sweeps status --json``, ``sweeps trials e2e`` and its JSON, run in this process."""
    import contextlib
    import io
    import os

    outputs = []
    old = Path.cwd()
    os.chdir(cwd)
    try:
        for args in (["status", "--json"], ["trials", "e2e"], ["trials", "e2e", "--json"]):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                assert main(*args) == 0
            outputs.append(buffer.getvalue())
    finally:
        os.chdir(old)
    return outputs[0], outputs[1], json.loads(outputs[2])


@pytest.mark.study
def test_a_study_end_to_end(corpus: Path, tmp_path: Path) -> None:
    # Three distinct points, enqueued: a point proposed twice would be a copy, never trained.
    data = spec_dict(
        "e2e",
        corpus,
        fixed={"tokenizer": "word", "lr": 3e-2},
        space={"vocab_size": {"choices": [300, 600, 1024]}},
        study={"n_trials": 3},
        enqueue=[{"vocab_size": 600}, {"vocab_size": 300}, {"vocab_size": 1024}],
    )
    (tmp_path / "e2e.toml").write_text(toml_text(data))
    first = sweeps_run("run", "e2e.toml", "--n-trials", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "created study 'e2e' in sqlite:///sweeps.db" in first.stderr
    assert "trial 0 complete" in first.stderr and "2/2 finished" in first.stderr
    assert "finished    2/2" in first.stdout
    assert (tmp_path / "runs" / "e2e" / "trials" / "1" / "result.json").is_file()
    again = sweeps_run("run", "e2e.toml", cwd=tmp_path)  # the spec's 3: one more trial
    assert again.returncode == 0, again.stderr
    assert "resuming study 'e2e'" in again.stderr and "trial 2 complete" in again.stderr
    status, listed, rows = read_back(tmp_path)
    [row] = json.loads(status)
    assert (row["study"], row["finished"], row["n_trials"]) == ("e2e", 3, 3)
    assert row["outcomes"] == {"complete": 3}
    # the best value stands beside its trial's unigram baseline
    best = rows[[r["number"] for r in rows].index(int(row["best"].split("trial ")[1][0]))]
    assert row["best_unigram_baseline"] == best["unigram_bpb"] > 0
    assert f"unigram {best['unigram_bpb']:.4f}" in row["best"]
    assert "unigram" in listed and f"{best['unigram_bpb']:.4f}" in listed
    for needle in ("vocab_size=600", "complete", "trained"):
        assert needle in listed
    assert [r["number"] for r in rows] == [0, 1, 2] and rows[0]["params"] == {"vocab_size": 600}
    optuna_cli = Path(sys.executable).parent / "optuna"
    theirs = subprocess.run(
        [
            str(optuna_cli),
            "trials",
            "--study-name",
            "e2e",
            "--storage",
            "sqlite:///sweeps.db",
            "-f",
            "json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert theirs.returncode == 0, theirs.stderr
    assert [(r["number"], r["state"]) for r in json.loads(theirs.stdout)] == [
        (r["number"], r["state"]) for r in rows
    ]


@pytest.mark.study
def test_the_demo_runs_its_study_and_writes_its_report(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sweeps demo`` end to end, on a two-trial stand-in for the quickstart spec (the real one
    takes a minute): its study, then its report (the demo once called the report command with
    an argument it no longer had, after the run had finished)."""
    spec = tmp_path / "mini.toml"
    spec.write_text(
        toml_text(
            spec_dict(
                "mini",
                corpus,
                fixed={"tokenizer": "word"},
                space={"vocab_size": {"choices": [300, 600]}},
                study={"n_trials": 2},
            )
        )
    )
    monkeypatch.setattr(cli, "QUICKSTART", spec)
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    assert main("demo", "--out", str(tmp_path / "out")) == 0
    report = tmp_path / "out" / "mini.html"
    assert report.is_file() and "plotly" in report.read_text()
    assert (tmp_path / "out" / "sweeps.db").is_file()


@pytest.mark.study
def test_sigterm_stops_the_children_and_marks_their_trials_interrupted(
    corpus: Path, tmp_path: Path
) -> None:
    from optuna.trial import TrialState

    from tests.sweeps.helpers import (
        lm_processes,
        running_with_evals,
        study_trials,
        sweeps_popen,
        wait_for,
    )

    data = spec_dict(
        "term",
        corpus,
        fixed={"tokenizer": "word", "max_tokens": 10_000_000},
        space={"vocab_size": {"choices": [300, 600]}},
        study={"n_trials": 2},
        limits={"collapse": False},
    )
    (tmp_path / "term.toml").write_text(toml_text(data))
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    proc = sweeps_popen("run", "term.toml", cwd=tmp_path)
    try:
        wait_for(lambda: running_with_evals(url, "term", proc.pid) is not None, 90, "a trial")
        number = running_with_evals(url, "term", proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "stopped; `sweeps run` again resumes the study" in err
    trials = study_trials(url, "term")
    stopped = trials[number]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["outcome"] == "interrupted"
    retry = [t for t in trials if t.user_attrs.get("retry_of") == number]
    assert len(retry) == 1 and retry[0].state == TrialState.WAITING
    assert retry[0].params == stopped.params
    assert lm_processes(tmp_path) == []


def test_dry_run_warns_about_points_too_short_to_judge(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # 4,096 tokens per step: 2 optimizer steps of a 8,192-token budget, far below min_steps.
    (tmp_path / "spec.toml").write_text(
        spec_text(corpus, fixed="max_tokens = 8192\nbatch_size = 16\nseq_len = 256")
    )
    assert main("run", "spec.toml", "--dry-run") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "optimizer steps 2 to 2 per trial" in out
    assert "2 of 2 points get fewer than limits.collapse.min_steps = 200" in out
    assert "d_ff=32: 2 steps" in out and "under_trained" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_dry_run_warns_about_points_whose_rate_is_too_small_to_judge(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # 16 tokens per step: 512 steps, enough; but lr 1e-5 over them sums to about 0.005.
    (tmp_path / "spec.toml").write_text(
        spec_text(
            corpus,
            fixed="max_tokens = 8192\nbatch_size = 1\nseq_len = 16\nwarmup_tokens = 0\nlr = 1e-5",
        )
    )
    assert main("run", "spec.toml", "--dry-run") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "optimizer steps 512 to 512 per trial" in out
    assert "too few steps to judge" not in out
    assert (
        "2 of 2 points sum their learning rate over their steps to less than "
        "limits.collapse.min_lr_sum = 0.5"
    ) in out
    assert "d_ff=32: 0.00" in out and "under_trained" in out and "raise lr or max_tokens" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]
