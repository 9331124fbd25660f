"""A trial's child, and the fork server that forks it, never hold the database's credentials
(#34, item 11): with ``SWEEPS_STORAGE`` holding a password, ``/proc/PID/environ`` of each showed
it. Real launchers, a real trial: its child's environment is read while it trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sweeps import childenv
from sweeps.forkserver import ForkServer
from sweeps.launchers import SubprocessLauncher
from sweeps.runner import RunnerContext, run_trial
from sweeps.spec import read_spec
from tests.sweeps.helpers import CPU, environ_of, spec_dict, worker_study

SECRETS = {
    "SWEEPS_STORAGE": "postgresql://alice:hunter2@127.0.0.1:5432/sweeps",
    "PGPASSWORD": "hunter3",
    "DATABASE_URL": "postgresql://bob:hunter4@db.example/x",
}


def assert_clean(env: dict[str, str]) -> None:
    assert not set(SECRETS) & set(env), sorted(set(SECRETS) & set(env))
    assert not any("hunter" in v for v in env.values())
    assert env["SWEEPS_PROBE_KEPT"] == "kept"  # the rest of the environment is passed on


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**SECRETS, "SWEEPS_PROBE_KEPT": "kept"}.items():
        monkeypatch.setenv(name, value)


def test_what_counts_as_a_credential() -> None:
    env = {
        **SECRETS,
        "PATH": "/usr/bin",
        "HOME": "/root",
        "NOTE": "https://example.org/a@b",
        "PROXY": "http://user:pw@proxy:3128",
    }
    assert childenv.child_environ({"EXTRA": "1"}, base=env) == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "NOTE": "https://example.org/a@b",
        "EXTRA": "1",
    }


@pytest.mark.study
@pytest.mark.parametrize("kind", ["fork", "subprocess"])
def test_a_trial_child_has_no_database_credentials(
    kind: str, tmp_path: Path, corpus: Path, secret_env: None
) -> None:
    spec = read_spec(
        spec_dict("secret", corpus, fixed={"max_tokens": 10_000_000}, limits={"collapse": False}),
        source=tmp_path / "spec.toml",
    )
    storage, study = worker_study(spec, tmp_path / "sweeps.db")
    launcher: Any = ForkServer().start() if kind == "fork" else SubprocessLauncher()
    seen: dict[str, dict[str, str]] = {}
    try:
        if kind == "fork":
            seen["server"] = environ_of(launcher._proc.pid)
        ctx = RunnerContext(
            spec=spec,
            study=study,
            storage=storage,
            study_dir=tmp_path / "runs",
            launcher=launcher,
            budget_bytes=4 * 2**30,
            poll_s=0.05,
            term_grace_s=5.0,
        )

        def on_event(event: str, data: dict[str, Any]) -> None:
            if event == "launch":  # the child is alive: it trains until stopped
                seen["child"] = environ_of(int(data["pid"]))
            elif event == "eval":
                ctx.stop.stop.set()

        ctx.on_event = on_event
        report = run_trial(ctx, CPU, study.ask())
    finally:
        launcher.close()
    assert report.outcome == "interrupted", report.reason
    for env in seen.values():
        assert_clean(env)
    assert set(seen) == ({"server", "child"} if kind == "fork" else {"child"})
