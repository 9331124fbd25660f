"""One trial at a time through ``runner.run_trial``: real training children on a tiny corpus
(the shared helpers are in ``tests/sweeps/helpers.py``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from lm import memory, outcomes
from sweeps import preflight, records
from sweeps import storage as st
from sweeps.forkserver import ForkChild, ForkServer, read_reply
from sweeps.launchers import PopenChild, SubprocessLauncher
from sweeps.monitor import MetricsFollower, classify
from sweeps.preflight import TrialPlan
from sweeps.runner import RunnerContext, run_trial
from sweeps.spec import StudySpec, read_spec
from sweeps.verdicts import Verdict
from tests.sweeps.helpers import (
    CPU,
    TINY,
    lm_processes,
    spec_dict,
    worker_study,
)

# --- helpers ------------------------------------------------------------------------------------


def open_study(tmp: Path, data: dict[str, Any]) -> tuple[StudySpec, st.RDBStorage, optuna.Study]:
    spec = read_spec(data, source=tmp / "spec.toml")
    return (spec, *worker_study(spec, tmp / "sweeps.db"))


def context(
    spec: StudySpec, storage: Any, study: optuna.Study, tmp: Path, launcher: Any, **kwargs: Any
) -> RunnerContext:
    return RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp / "runs",
        launcher=launcher,
        budget_bytes=kwargs.pop("budget", 4 * 2**30),
        poll_s=0.05,
        term_grace_s=5.0,
        **kwargs,
    )


def frozen(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


# --- pieces --------------------------------------------------------------------------------------


def test_metrics_follower_returns_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFollower(path)
    assert follower.read() == []
    path.write_text('{"step": 1}\n{"step": 2')
    assert follower.read() == [{"step": 1}]
    with open(path, "a") as fh:
        fh.write(', "tokens": 5}\n\n')
    assert follower.read() == [{"step": 2, "tokens": 5}]
    assert follower.read() == []
    assert follower.problems == []
    with open(path, "a") as fh:  # well-formed JSON of the wrong shape, and a broken line
        fh.write('[1, 2, 3]\n"text"\n{"step": 3, "tokens": "many"}\n{oops\n')
    assert follower.read() == [{"step": 3}]
    assert len(follower.problems) == 4


@pytest.mark.parametrize(
    ("rc", "result", "stopped", "expected"),
    [
        (
            6,
            {"outcome": "interrupted", "reason": "SIGTERM"},
            Verdict("unigram_collapse", "x"),
            "unigram_collapse",
        ),
        (0, {"outcome": "complete", "reason": "ok"}, None, "complete"),
        (3, {"outcome": "oom", "reason": "MemoryError"}, None, "oom"),
        (-signal.SIGKILL, None, None, "oom"),
        (-signal.SIGTERM, None, None, "interrupted"),  # a scancel before the child's handler
        (137, None, None, "oom"),
        (2, None, None, "crashed"),
        (4, None, None, "diverged"),
        (1, None, None, "crashed"),
        (0, None, None, "crashed"),  # exit 0 without a result file is not a success
    ],
)
def test_classify(
    rc: int, result: dict | None, stopped: Verdict | None, expected: str, tmp_path: Path
) -> None:
    (tmp_path / "train.log").write_text("error: corpus /x does not exist\n")
    outcome, reason = classify(rc, result, stopped, tmp_path)
    assert outcome == expected
    if rc == 2:
        assert "corpus /x does not exist" in reason
    if rc == -signal.SIGKILL:
        assert "SIGKILL" in reason and "out-of-memory killer" in reason


# --- real trials ---------------------------------------------------------------------------------


@pytest.mark.study
def test_a_complete_trial_records_the_contract(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    data = spec_dict("contract", corpus)
    spec, storage, study = open_study(tmp_path, data)
    study.enqueue_trial({"tokenizer": "word", "vocab_size": 300})
    events: list[str] = []
    ctx = context(
        spec, storage, study, tmp_path, fork_server, on_event=lambda kind, _: events.append(kind)
    )
    report = run_trial(ctx, CPU, study.ask())
    assert (report.outcome, report.told) == ("complete", True), report.reason
    t = frozen(study, report.number)
    a = t.user_attrs
    assert t.state == TrialState.COMPLETE and t.values == [a["val_bpb"]]
    run_dir = Path(a["run_dir"])
    assert run_dir == tmp_path / "runs" / "trials" / str(t.number)
    assert json.loads((run_dir / "config.json").read_text()) == a["config"]
    assert a["config"]["cpu_memory_limit_bytes"] == preflight.cpu_child_limit(
        4 * 2**30, a["predicted_mem_bytes"]
    )
    assert a["sampled"] == t.params == {"tokenizer": "word", "vocab_size": 300}
    assert "fitted" not in a
    for key in (
        "host",
        "pid",
        "started_at",
        "wall_s",
        "cold_start_s",
        "setup_s",
        "predicted_mem_bytes",
        "predicted_mem_raw_bytes",
        "memory_budget_bytes",
        "calibration_factor",
        "predicted_peak_mem_raw_bytes",
        "predicted_peak_mem_kind",
        "peak_mem_kind",
        "peak_mem_bytes",
        "tokens_seen",
        "tokens_per_s",
        "params_total",
        "params",
        "bytes_per_token",
        "unk_rate",
        "train_s",
        "val_bpb",
        "val_loss",
        "accuracy",
        "unigram_entropy",
        "unigram_bpb",
        "unigram_gap",
        "kl_mean_to_unigram",
        "mean_kl_to_mean",
        "top20_overlap",
        "unk_rate_targets",
        "best_val_bpb",
    ):
        assert key in a, key
    assert a["outcome"] == "complete" and a["constraint"] == 0.0 and a["pid"] == os.getpid()
    assert a["peak_mem_kind"] == a["predicted_peak_mem_kind"] == "cpu_peak_anon"
    assert a["config"]["cuda_memory_limit_bytes"] is None  # a CPU trial
    assert t.system_attrs.get("constraints:memory") == 0.0
    assert a["tokens_seen"] >= 4000 and 0 < a["train_s"] < a["wall_s"]
    assert 0 < a["setup_s"] < a["cold_start_s"] < a["wall_s"] - a["train_s"]
    evals = records.read_evals(storage, "contract", t.number)
    assert [e["tokens"] for e in evals] == [2048, 4096]
    assert "samples" not in evals[0]["metrics"] and evals[-1]["val_bpb"] == a["val_bpb"]
    assert len(records.read_samples(storage, "contract", t.number)) == 2 * len(TINY and evals)
    hosts = records.read_hosts(storage, "contract")
    assert [(h["trial_number"], h["pid"]) for h in hosts] == [(t.number, os.getpid())]
    # progress events come as often as the polls catch the child's progress.json
    assert [e for e in events if e != "progress"] == ["start", "launch", "eval", "eval", "end"]
    assert lm_processes(tmp_path) == []


class Underestimate:
    """A memory estimate 100x too small: only the enforced limit stands between the trial and
    the machine."""

    calibration_factor = staticmethod(lambda study: 1.0)
    halve_batch = staticmethod(preflight.halve_batch)

    @staticmethod
    def plan_trial(
        cfg: Any,
        limits: Any,
        *,
        device: str,
        budget_bytes: int | None,
        calibration: float = 1.0,
        launcher: str = "subprocess",
    ) -> TrialPlan:
        return TrialPlan(cfg, True, 2**20, 2**20, budget_bytes, None, "wrong on purpose")

    @staticmethod
    def cpu_child_limit(budget_bytes: int, predicted_bytes: int) -> int:
        return 16 * 2**20  # what the (wrong) prediction plus slack would allow


@pytest.mark.study
def test_an_over_budget_trial_ends_oom_and_the_study_goes_on(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    data = spec_dict(
        "limit",
        corpus,
        space={"batch_size": {"choices": [8, 256]}, "seq_len": {"choices": [16, 64]}},
        fixed={"tokenizer": "word", "vocab_size": 600},
    )
    spec, storage, study = open_study(tmp_path, data)
    study.enqueue_trial({"batch_size": 256, "seq_len": 64})  # B x T x V logits: 40 MB a copy
    study.enqueue_trial({"batch_size": 8, "seq_len": 16})
    ctx = context(spec, storage, study, tmp_path, fork_server, preflight=Underestimate)
    big = run_trial(ctx, CPU, study.ask())
    assert big.outcome == "oom", big.reason
    a = frozen(study, big.number).user_attrs
    assert a["config"]["cpu_memory_limit_bytes"] == 16 * 2**20
    assert a["constraint"] == 1.0 and frozen(study, big.number).state == TrialState.PRUNED
    assert a["returncode"] == outcomes.EXIT_CODES["oom"]  # the child caught it, wrote result
    small = run_trial(ctx, CPU, study.ask())
    assert small.outcome == "complete", small.reason


def test_predicted_oom_is_never_launched(tmp_path: Path, corpus: Path, fork_server: Any) -> None:
    spec, storage, study = open_study(tmp_path, spec_dict("predicted", corpus))
    study.enqueue_trial({"tokenizer": "bpe", "vocab_size": 600})
    ctx = context(spec, storage, study, tmp_path, fork_server, budget=64 * 2**20)
    report = run_trial(ctx, CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == "predicted_oom" and t.state == TrialState.PRUNED
    assert "> budget 64.0 MiB" in t.user_attrs["reason"]
    assert t.user_attrs["constraint"] == 1.0 and "run_dir" not in t.user_attrs
    assert t.user_attrs["predicted_mem_bytes"] > 64 * 2**20
    assert not (tmp_path / "runs").exists()


class NeverLaunched:
    """A launcher of the given kind for trials the plan refuses: launching one is a failure."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def launch(self, run_dir: Path, **_: Any) -> PopenChild:
        raise AssertionError("a predicted_oom trial is never launched")

    def close(self) -> None:
        pass


def test_a_trial_is_planned_for_the_launcher_that_starts_it(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked child's baseline is its own (``lm.memory.CPU_FORK_SAVING_BYTES``, measured 0
    today): a real run plans with the launcher it uses, as ``sweeps estimate --launcher`` does,
    so a saving, when there is one, applies where trials run."""
    monkeypatch.setattr(memory, "CPU_FORK_SAVING_BYTES", 50 * 2**20)
    predicted = {}
    for kind in ("subprocess", "fork"):
        (tmp_path / kind).mkdir()
        spec, storage, study = open_study(tmp_path / kind, spec_dict("launcher", corpus))
        study.enqueue_trial({"tokenizer": "word", "vocab_size": 300})
        ctx = context(spec, storage, study, tmp_path / kind, NeverLaunched(kind), budget=64 * 2**20)
        report = run_trial(ctx, CPU, study.ask())
        assert report.outcome == "predicted_oom", report.reason
        predicted[kind] = frozen(study, report.number).user_attrs["predicted_mem_raw_bytes"]
    assert predicted["subprocess"] - predicted["fork"] == 50 * 2**20


@pytest.mark.study
def test_fit_policy_trains_the_fitted_batch_and_records_both(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    data = spec_dict(
        "fit",
        corpus,
        space={"batch_size": {"choices": [8, 512]}},
        fixed={"tokenizer": "word", "vocab_size": 600, "seq_len": 32},
        limits={"oom_policy": "fit"},
    )
    spec, storage, study = open_study(tmp_path, data)
    from sweeps.space import trial_config

    big = preflight.predict(trial_config(spec, {"batch_size": 512}), device="cpu")[0]
    small = preflight.predict(trial_config(spec, {"batch_size": 64}), device="cpu")[0]
    assert small < big
    study.enqueue_trial({"batch_size": 512})
    ctx = context(spec, storage, study, tmp_path, fork_server, budget=(small + big) // 2)
    report = run_trial(ctx, CPU, study.ask())
    a = frozen(study, report.number).user_attrs
    assert report.outcome == "complete", report.reason
    assert a["sampled"] == {"batch_size": 512}
    assert a["fitted"]["batch_size"] < 512
    assert a["fitted"]["batch_size"] * a["fitted"]["grad_accum"] == 512
    assert (a["config"]["batch_size"], a["config"]["grad_accum"]) == (
        a["fitted"]["batch_size"],
        a["fitted"]["grad_accum"],
    )


@pytest.mark.parametrize(
    ("unk_limit", "expected", "words"),
    [
        (1.0, "unigram_collapse", "predicts the corpus frequencies"),  # the <unk> verdict off
        (0.5, "unk_dominated", "<unk> is the likeliest prediction"),
    ],
)
@pytest.mark.study
def test_a_collapsed_config_is_stopped_with_its_verdict(
    tmp_path: Path, corpus: Path, fork_server: Any, unk_limit: float, expected: str, words: str
) -> None:
    # Six ids: <pad> <Q> <A> <D> <unk> and one word. Every target is a marker or <unk>, so the
    # best the model can do is the unigram, and <unk> is what it predicts. Judged from step 20
    # and a learning rate summed to 0.02 (lr 3e-3 sums to under 0.1 by step 32).
    data = spec_dict(
        "collapse",
        corpus,
        space={"vocab_size": {"choices": [6, 300]}},
        fixed={"tokenizer": "word", "lr": 3e-3, "max_tokens": 16_000},
        limits={
            "collapse": {
                "min_steps": 20,
                "min_lr_sum": 0.02,
                "max_unk_argmax": unk_limit,
                # the data's own rule off: the predictions' are judged
                "max_unk_targets": 1.0,
            }
        },
    )
    spec, storage, study = open_study(tmp_path, data)
    study.enqueue_trial({"vocab_size": 6})
    ctx = context(spec, storage, study, tmp_path, fork_server)
    report = run_trial(ctx, CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == expected, report.reason
    assert t.state == TrialState.PRUNED and t.user_attrs["constraint"] == 0.0
    assert words in t.user_attrs["reason"] and "after 32 optimizer steps" in t.user_attrs["reason"]
    # The verdict can be checked from the database alone.
    assert t.user_attrs["last_eval_step"] == 32 and t.user_attrs["steps"] >= 32
    assert "kl_mean_to_unigram" in t.user_attrs
    # Stopped at the second evaluation (step 32, the first past min_steps), long before 16,000.
    assert t.user_attrs["tokens_seen"] < 16_000
    assert len(records.read_evals(storage, "collapse", t.number)) == 2


@pytest.mark.study
def test_a_trial_too_short_to_judge_runs_unjudged_with_a_note(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    data = spec_dict(
        "short",
        corpus,
        space={"vocab_size": {"choices": [6]}},
        fixed={"tokenizer": "word", "lr": 3e-3, "max_tokens": 4_000},
        limits={"collapse": {"max_unk_targets": 1.0}},
    )
    spec, storage, study = open_study(tmp_path, data)
    report = run_trial(context(spec, storage, study, tmp_path, fork_server), CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == "complete", report.reason  # 32 steps: never judged
    assert t.user_attrs["planned_steps"] == 32
    assert t.user_attrs["under_trained"].startswith("32 optimizer steps, fewer than the 200")


@pytest.mark.study
def test_a_trial_whose_rate_is_too_small_to_judge_runs_unjudged(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    """The collapsed configuration above, judged from step 20 but with the default
    ``min_lr_sum``: lr 3e-3 over its 125 steps sums to 0.21, not 0.5, so it is never judged; it ends
    complete, marked under_trained, and its value is the sampler's like any other."""
    data = spec_dict(
        "slow",
        corpus,
        space={"vocab_size": {"choices": [6]}},
        fixed={"tokenizer": "word", "lr": 3e-3, "max_tokens": 16_000},
        limits={"collapse": {"min_steps": 20, "max_unk_argmax": 1.0, "max_unk_targets": 1.0}},
    )
    spec, storage, study = open_study(tmp_path, data)
    report = run_trial(context(spec, storage, study, tmp_path, fork_server), CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == "complete", report.reason
    assert t.state == TrialState.COMPLETE and t.value == t.user_attrs["val_bpb"]
    note = t.user_attrs["under_trained"]
    assert note.startswith("its learning rate summed over its 125 optimizer steps is 0.207"), note
    assert "below the 0.5 needed to judge" in note
    rows = records.read_evals(storage, "slow", t.number)
    last = rows[-1]["metrics"]
    assert last["step"] == 125 and last["lr_sum"] == pytest.approx(0.207, abs=5e-4)


@pytest.mark.study
def test_a_stop_request_interrupts_the_child(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    data = spec_dict("stop", corpus, fixed={"max_tokens": 10_000_000}, limits={"collapse": False})
    spec, storage, study = open_study(tmp_path, data)
    ctx = context(spec, storage, study, tmp_path, fork_server)
    ctx.on_event = lambda kind, _: ctx.stop.stop.set() if kind == "eval" else None
    report = run_trial(ctx, CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == "interrupted" and t.state == TrialState.FAIL
    assert t.user_attrs["tokens_seen"] < 10_000_000  # stopped, not run to its end
    assert lm_processes(tmp_path) == []


@pytest.mark.study
def test_the_subprocess_launcher_runs_the_same_trial(tmp_path: Path, corpus: Path) -> None:
    spec, storage, study = open_study(tmp_path, spec_dict("plain", corpus))
    study.enqueue_trial({"tokenizer": "bpe", "vocab_size": 300})
    ctx = context(spec, storage, study, tmp_path, SubprocessLauncher())
    report = run_trial(ctx, CPU, study.ask())
    assert report.outcome == "complete", report.reason
    log = (tmp_path / "runs" / "trials" / str(report.number) / "train.log").read_text()
    assert "complete: trained" in log


# --- stopping a child that will not stop ---------------------------------------------------------


#: How long a stubborn child sleeps before it exits by itself (returncode 0). A test that sees
#: it end by SIGKILL knows it was killed before then: no clock is read, so a busy machine does
#: not fail what it only slows.
STUBBORN_SLEEP_S = 120


class StubbornLauncher:
    """Children that ignore SIGTERM (a hung trial): only SIGKILL ends them."""

    kind = "subprocess"

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict | None = None,
        cpus: list[int] | None = None,
    ) -> PopenChild:
        code = (
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open(sys.argv[1], 'w').close(); time.sleep({STUBBORN_SLEEP_S})"
        )
        return PopenChild(
            subprocess.Popen(
                [sys.executable, "-c", code, str(run_dir / "ready")], start_new_session=True
            )
        )

    def close(self) -> None:
        pass


def stubborn_trial(
    tmp: Path, corpus: Path, grace: float, on_launch: Any
) -> tuple[Any, optuna.trial.FrozenTrial]:
    spec, storage, study = open_study(tmp, spec_dict("stubborn", corpus))
    ctx = context(spec, storage, study, tmp, StubbornLauncher())
    ctx.term_grace_s = grace

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "launch":
            ready = Path(data["run_dir"]) / "ready"
            deadline = time.monotonic() + 30
            while not ready.exists() and time.monotonic() < deadline:  # SIGTERM is ignored now
                time.sleep(0.02)
            on_launch(ctx)

    ctx.on_event = on_event
    report = run_trial(ctx, CPU, study.ask())
    return report, frozen(study, report.number)


@pytest.mark.study
def test_sigkill_follows_sigterm_after_the_grace_period(tmp_path: Path, corpus: Path) -> None:
    report, t = stubborn_trial(tmp_path, corpus, 0.5, lambda ctx: ctx.stop.stop.set())
    assert report.outcome == "interrupted" and t.user_attrs["returncode"] == -signal.SIGKILL


@pytest.mark.study
def test_a_second_stop_request_kills_at_once(tmp_path: Path, corpus: Path) -> None:
    def stop_twice(ctx: RunnerContext) -> None:
        ctx.stop.stop.set()
        threading.Timer(0.3, ctx.stop.kill.set).start()

    assert STUBBORN_SLEEP_S < 600  # so a SIGKILL ending it did not wait for the grace
    report, t = stubborn_trial(tmp_path, corpus, 600, stop_twice)
    assert report.outcome == "interrupted" and t.user_attrs["returncode"] == -signal.SIGKILL


@pytest.mark.study
def test_the_wall_clock_limit_ends_a_hung_trial_as_timeout(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sweeps import monitor

    monkeypatch.setattr(monitor, "hard_wall_s", lambda limits: 0.5)
    report, t = stubborn_trial(tmp_path, corpus, 0.5, lambda ctx: None)
    assert report.outcome == "timeout" and t.state == TrialState.PRUNED
    assert "still running" in t.user_attrs["reason"]
    assert " s of CPU in " in t.user_attrs["reason"]  # a busy machine is told from a slow run
    assert t.user_attrs["returncode"] == -signal.SIGKILL  # ended by the limit, not by itself


@pytest.mark.study
def test_a_dead_fork_server_fails_its_trial_and_is_restarted(tmp_path: Path, corpus: Path) -> None:
    spec, storage, study = open_study(tmp_path, spec_dict("restart", corpus))
    with ForkServer() as fork:
        ctx = context(spec, storage, study, tmp_path, fork)
        ctx.on_event = lambda kind, _: fork._proc.kill() if kind == "launch" else None
        report = run_trial(ctx, CPU, study.ask())
        assert report.outcome == "crashed" and "fork server ended" in report.reason
        ctx.on_event = None
        assert run_trial(ctx, CPU, study.ask()).outcome == "complete"
    assert lm_processes(tmp_path) == []


def test_the_fork_server_serves_only_its_own_orchestrator(fork_server: Any, tmp_path: Path) -> None:
    code = """if True:
        import socket, sys
        s = socket.socket(socket.AF_UNIX)
        s.connect(chr(0) + sys.argv[1])
        try:
            s.sendall(b'{"run_dir": "/x", "log": "/x/log"}\\n')
            print(repr(s.recv(100)))
        except OSError:
            print("closed")
    """
    other = subprocess.run(
        [sys.executable, "-c", code, fork_server.socket_address[1:]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() in ("b''", "closed")  # closed unanswered: nothing forked


def test_a_return_code_in_the_same_read_as_the_pid_is_kept() -> None:
    """The server sends a child's pid line, then its return code line when it ends: for a child
    that ends at once both can come in one read. The client used to parse the whole read as one
    JSON document (``JSONDecodeError: Extra data``, seen once when two trials started together
    on a cold token cache) and would have lost the return code. Not reproduced with real forks
    (0 failures in 30 children that exit at once): the client must be slow to read."""
    client, server_end = socket.socketpair()
    try:
        server_end.sendall(b'{"pid": 4242}\n{"returncode": 3}\n')
        reply, rest = read_reply(client)
        assert reply == {"pid": 4242} and rest == b'{"returncode": 3}\n'
        child = ForkChild(client, 4242, rest)
        assert child.poll() == 3 and child.wait(1) == 3
    finally:
        client.close()
        server_end.close()


# --- a child whose files are well-formed but wrong-shaped ----------------------------------------


class GarbledLauncher:
    """Children that write wrong-shaped metrics lines and a result with a non-number peak, then
    exit 0, as a buggy or hostile child could."""

    kind = "subprocess"

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict | None = None,
        cpus: list[int] | None = None,
    ) -> PopenChild:
        code = (
            "import json, sys, pathlib; d = pathlib.Path(sys.argv[1])\n"
            'lines = [\'[1,2,3]\', \'"text"\', \'{"step": "one", "tokens": 100, '
            '"val_bpb": "low", "samples": "none"}\', '
            '\'{"step": 2, "tokens": 200, "val_bpb": 3.5, "val_loss": 2.0}\']\n'
            "(d / 'metrics.jsonl').write_text('\\n'.join(lines) + '\\n')\n"
            "(d / 'result.json').write_text(json.dumps({'outcome': 'complete', 'reason': 'ok',"
            " 'exit_code': 0, 'peak_mem_bytes': 'big', 'tokens_seen': 200, 'params': [1],"
            " 'final_metrics': {'val_bpb': 3.5, 'val_loss': 2.0, 'tokens': 200}}))\n"
        )
        return PopenChild(
            subprocess.Popen([sys.executable, "-c", code, str(run_dir)], start_new_session=True)
        )

    def close(self) -> None:
        pass


@pytest.mark.study
def test_wrong_shaped_child_files_are_skipped_and_noted_not_fatal(
    tmp_path: Path, corpus: Path
) -> None:
    spec, storage, study = open_study(tmp_path, spec_dict("garbled", corpus))
    report = run_trial(context(spec, storage, study, tmp_path, GarbledLauncher()), CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == "complete" and t.values == [3.5]  # judged on what was valid
    problems = t.user_attrs["child_file_problems"]
    assert [p.split("=")[0] for p in problems[2:]] == [
        "step",
        "val_bpb",
        "samples",
        "peak_mem_bytes",
        "params",
    ]
    assert all("not an object" in p for p in problems[:2])
    evals = records.read_evals(storage, "garbled")
    assert [e["tokens"] for e in evals] == [100, 200]


def test_a_cuda_child_is_limited_to_the_reservation_it_was_admitted_with() -> None:
    """The GPU child gets its reservation as ``cuda_memory_limit_bytes`` (``lm.runtime`` makes
    it the allocator's share of the device), so an over-budget trial ends ``oom`` itself; a
    tighter value from the spec is kept; a CPU child gets none."""
    from types import SimpleNamespace

    from lm.config import TrainConfig
    from sweeps.runner import WorkerDevice, _with_memory_limit

    ctx = SimpleNamespace(preflight=preflight)
    cfg = TrainConfig.from_dict({"corpus": "/c", "device": "cuda"})
    gpu = WorkerDevice("cuda", {"CUDA_VISIBLE_DEVICES": "0"}, None, "gpu 0")
    reserved = 900 * 2**20
    limited = _with_memory_limit(ctx, gpu, cfg, 800 * 2**20, reserved)
    assert limited.cuda_memory_limit_bytes == reserved and limited.cpu_memory_limit_bytes is None
    tight = dataclasses.replace(cfg, cuda_memory_limit_bytes=600 * 2**20)
    assert (
        _with_memory_limit(ctx, gpu, tight, 800 * 2**20, reserved).cuda_memory_limit_bytes
        == 600 * 2**20
    )
    assert _with_memory_limit(ctx, gpu, cfg, 800 * 2**20, None) is cfg  # no budget, no limit
    cpu = _with_memory_limit(
        ctx, WorkerDevice(), dataclasses.replace(cfg, device="cpu"), 800 * 2**20, reserved
    )
    assert cpu.cuda_memory_limit_bytes is None and cpu.cpu_memory_limit_bytes is not None


# --- one truth per trial: the verdict, the told value, the progress ------------------------------


class ScriptedLauncher:
    """Children that write the given ``metrics.jsonl`` rows and ``result.json``, then exit 0;
    with ``progress``, they first write ``progress.json`` at that many tokens and wait (at most
    60 s) for a file ``go`` in their run dir, which the test creates once the parent has told
    of that progress."""

    kind = "subprocess"

    def __init__(
        self, rows: list[dict[str, Any]], result: dict[str, Any], progress: int | None = None
    ) -> None:
        self.rows, self.result, self.progress = rows, result, progress

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict | None = None,
        cpus: list[int] | None = None,
    ) -> PopenChild:
        code = (
            "import json, sys, time, pathlib; d = pathlib.Path(sys.argv[1])\n"
            "rows, result, progress = json.loads(sys.argv[2])\n"
            "if progress is not None:\n"
            "    (d / 'progress.json').write_text(json.dumps({'tokens': progress}))\n"
            "    deadline = time.monotonic() + 60\n"
            "    while not (d / 'go').exists() and time.monotonic() < deadline:\n"
            "        time.sleep(0.02)\n"
            "(d / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\\n' for r in rows))\n"
            "(d / 'result.json').write_text(json.dumps(result))\n"
            "print('complete: trained', flush=True)\n"
        )
        args = json.dumps([self.rows, self.result, self.progress])
        with open(log_path, "ab") as log:
            return PopenChild(
                subprocess.Popen(
                    [sys.executable, "-c", code, str(run_dir), args],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )

    def close(self) -> None:
        pass


def _row(step: int, tokens: int, val_bpb: float, *, collapsed: bool) -> dict[str, Any]:
    """An evaluation that learns (context used, beats the unigram) or has collapsed."""
    return {
        "step": step,
        "tokens": tokens,
        "val_bpb": val_bpb,
        "val_loss": 2.5,
        "mean_kl_to_mean": 0.01 if collapsed else 1.0,
        "kl_mean_to_unigram": 0.1 if collapsed else 1.0,
        "unigram_gap": -0.05 if collapsed else 0.5,
        "unigram_bpb": 3.68,
    }


def test_a_verdict_at_the_last_evaluation_is_the_run_dirs_truth_and_its_value_the_last(
    tmp_path: Path, corpus: Path
) -> None:
    """A collapse judged at the final evaluation: the run's own result.json and log say so
    (the child had written complete), and Optuna's value is that evaluation's val_bpb, not the
    one before (once told PRUNED, Optuna takes the last reported intermediate value)."""
    data = spec_dict("verdict", corpus, limits={"collapse": {"min_steps": 1}})
    spec, storage, study = open_study(tmp_path, data)
    rows = [_row(10, 2000, 3.70, collapsed=False), _row(20, 4000, 3.6827, collapsed=True)]
    result = {
        "outcome": "complete",
        "reason": "trained 4,000 tokens",
        "exit_code": 0,
        "tokens_seen": 4000,
        "final_metrics": rows[-1],
    }
    report = run_trial(
        context(spec, storage, study, tmp_path, ScriptedLauncher(rows, result)), CPU, study.ask()
    )
    t = frozen(study, report.number)
    assert report.outcome == "unigram_collapse" and t.state == TrialState.PRUNED, report.reason
    assert t.value == t.user_attrs["val_bpb"] == 3.6827
    run_dir = Path(t.user_attrs["run_dir"])
    written = json.loads((run_dir / "result.json").read_text())
    assert (written["outcome"], written["reason"]) == ("unigram_collapse", t.user_attrs["reason"])
    assert (written["child_outcome"], written["child_reason"]) == (
        "complete",
        "trained 4,000 tokens",
    )
    log = (run_dir / "train.log").read_text()
    assert "sweeps verdict: unigram_collapse: " in log and "child reported complete" in log


def test_an_agreed_outcome_leaves_the_childs_result_as_it_wrote_it(
    tmp_path: Path, corpus: Path
) -> None:
    spec, storage, study = open_study(tmp_path, spec_dict("agreed", corpus))
    rows = [_row(10, 4000, 3.5, collapsed=False)]
    result = {"outcome": "complete", "reason": "ok", "exit_code": 0, "final_metrics": rows[-1]}
    report = run_trial(
        context(spec, storage, study, tmp_path, ScriptedLauncher(rows, result)), CPU, study.ask()
    )
    run_dir = Path(frozen(study, report.number).user_attrs["run_dir"])
    assert report.outcome == "complete"
    assert json.loads((run_dir / "result.json").read_text()) == result
    assert "sweeps verdict" not in (run_dir / "train.log").read_text()


def test_the_childs_progress_reaches_the_board_between_evaluations(
    tmp_path: Path, corpus: Path
) -> None:
    from sweeps.cli.progress import Board

    spec, storage, study = open_study(tmp_path, spec_dict("progress", corpus))
    rows = [_row(10, 4000, 3.5, collapsed=False)]
    result = {"outcome": "complete", "reason": "ok", "exit_code": 0, "final_metrics": rows[-1]}
    board = Board(study, 1)
    seen: list[tuple[str, Any]] = []
    run_dirs: list[Path] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        board.on_event(kind, data)
        seen.append((kind, data.get("tokens")))
        if kind == "launch":
            run_dirs.append(Path(data["run_dir"]))
        if kind == "progress":  # what the live board shows now, before any evaluation
            seen.append(("line", board.line()))
            (run_dirs[0] / "go").touch()

    ctx = context(
        spec,
        storage,
        study,
        tmp_path,
        ScriptedLauncher(rows, result, progress=1234),
        on_event=on_event,
    )
    assert run_trial(ctx, CPU, study.ask()).outcome == "complete"
    kinds = [k for k, _ in seen]
    assert kinds.index("progress") < kinds.index("eval")
    assert ("progress", 1234) in seen
    line = next(v for k, v in seen if k == "line")
    assert "1,234/4,000 tokens" in line, line


@pytest.mark.study
def test_a_vocabulary_that_drops_most_targets_is_judged_at_its_first_evaluation(
    tmp_path: Path, corpus: Path, fork_server: Any
) -> None:
    """Six word ids: nearly every target is <unk>. A fact of the data, so the verdict comes at
    the first evaluation (step 16 of 32), before min_steps and min_lr_sum could be reached."""
    data = spec_dict(
        "most",
        corpus,
        space={"vocab_size": {"choices": [6]}},
        fixed={"tokenizer": "word", "lr": 3e-3, "max_tokens": 4_000},
    )
    spec, storage, study = open_study(tmp_path, data)
    report = run_trial(context(spec, storage, study, tmp_path, fork_server), CPU, study.ask())
    t = frozen(study, report.number)
    assert report.outcome == "unk_dominated", report.reason
    assert "of the validation targets" in t.user_attrs["reason"]
    assert "max_unk_targets = 0.5" in t.user_attrs["reason"]
    assert t.user_attrs["last_eval_step"] < spec.limits.collapse.min_steps
