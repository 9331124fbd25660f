"""The Slurm engine: requests and the batch script from the prediction (no cluster), then a real
one-node Slurm (``tests/sweeps/slurm_cluster.py``: munged, slurmctld and slurmd started here as
root) running studies on PostgreSQL through ``sweeps run --engine slurm`` as a user runs it.
Skipped with the reason where Slurm, root or PostgreSQL is missing.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
from pathlib import Path

import optuna
import pytest

from lm.errors import SweepsError
from sweeps import admission as local
from sweeps import preflight, slurm_job
from sweeps import workers as wk
from sweeps.engines import slurm
from sweeps.space import trial_config
from sweeps.spec import StudySpec, load_spec, read_spec
from tests.sweeps import slurm_cluster
from tests.sweeps.helpers import (
    CHILD_ENV,
    SWEEPS,
    spec_dict,
    study_trials,
    toml_text,
    wait_for,
)

MiB = 2**20
GiB = 2**30
NODES = [slurm.Node("a", 2, 4 * GiB, 0), slurm.Node("b", 8, 64 * GiB, 2)]


def _spec(corpus: Path, name: str = "sl", **kw) -> StudySpec:
    return read_spec(spec_dict(name, corpus, **kw))


# --- requests and the script (no cluster) --------------------------------------------------------


def test_mem_is_the_largest_fitting_points_reservation(corpus: Path) -> None:
    spec = _spec(
        corpus, space={"vocab_size": {"choices": [300, 600]}, "d_model": {"choices": [16, 64]}}
    )
    req = slurm.plan_requests(spec, NODES, slurm.SlurmOptions(jobs=2))
    largest = max(
        preflight.predict(trial_config(spec, {"vocab_size": v, "d_model": d}), device="cpu")[0]
        for v in (300, 600)
        for d in (16, 64)
    )
    assert req.kind == "cpu" and req.predicted_bytes == largest
    assert req.point == {"vocab_size": 600, "d_model": 64}
    assert (
        req.mem_bytes
        == local.reservation(math.ceil(largest * slurm.CALIBRATION_HEADROOM)) + slurm.WORKER_BYTES
    )
    assert (req.cpus, req.gpus) == (1, 0)
    # Two trials per task: twice the reservation, twice the cores; calibration scales it.
    two = slurm.plan_requests(spec, NODES, slurm.SlurmOptions(trials_per_task=2), calibration=1.5)
    assert two.cpus == 2 and two.predicted_bytes == pytest.approx(1.5 * largest, rel=1e-6)
    assert (
        two.mem_bytes
        == 2 * local.reservation(math.ceil(two.predicted_bytes * slurm.CALIBRATION_HEADROOM))
        + slurm.WORKER_BYTES
    )


def test_a_point_over_the_budget_does_not_size_the_tasks(corpus: Path) -> None:
    space = {"d_model": {"choices": [16, 256]}, "seq_len": {"choices": [16, 512]}}
    spec = _spec(corpus, space=space, limits={"oom_policy": "prune"})
    big = preflight.predict(trial_config(spec, {"d_model": 256, "seq_len": 512}), device="cpu")[0]
    small = slurm.Node("s", 4, big - 8 * MiB + slurm.WORKER_BYTES, 0)  # too small for it
    req = slurm.plan_requests(spec, [small], slurm.SlurmOptions())
    assert req.predicted_bytes < big and req.point != {"d_model": 256, "seq_len": 512}
    with pytest.raises(SweepsError, match="no node of partition 'p' has"):
        slurm.check_fits(slurm.Requests(10 * GiB, 1, 0, 1, 1, "cpu", GiB), [small], "p")


def test_the_script_says_what_it_asks_for(corpus: Path, tmp_path: Path) -> None:
    spec = _spec(corpus)
    options = slurm.options_from(
        {"name": "slurm", "partition": "gpu", "jobs": 3, "sbatch_args": ["--constraint=a100"]},
        {
            "jobs": 4,
            "gpus_per_job": 2,
            "time": "01:00:00",
            "account": "lab",
            "qos": None,
            "sbatch_args": (),
        },
    )
    req = slurm.plan_requests(spec, NODES, options)
    text = slurm.script(
        spec,
        req,
        options,
        runs_dir=tmp_path / "runs",
        beats=(5, 30),
        workdir=tmp_path,
        python="/venv/bin/python",
    )
    directives = re.findall(r"^#SBATCH (.*)$", text, re.M)
    assert directives[:7] == [
        "--job-name=sweeps-sl",
        "--array=0-3",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        f"--mem={req.mem_mib}M",
        "--gres=gpu:2",
    ]
    assert {
        "--partition=gpu",
        "--time=01:00:00",
        "--account=lab",
        "--constraint=a100",
        f"--chdir={tmp_path}",
        f"--output={tmp_path}/runs/sl/slurm/%A_%a.out",
    } <= set(directives)
    assert not any("qos" in d for d in directives)
    assert text.rstrip().endswith(
        "exec /venv/bin/python -m sweeps worker sl --runs-dir "
        f"{tmp_path}/runs --max-concurrent 1 --launcher subprocess "
        "--heartbeat 5 --grace 30"
    )
    assert "postgresql" not in text and "SWEEPS_STORAGE:?" in text


def test_a_gpu_study_asks_for_gpus_and_its_host_memory(corpus: Path) -> None:
    spec = _spec(corpus, fixed={"device": "cuda"})
    req = slurm.plan_requests(spec, NODES, slurm.SlurmOptions(trials_per_task=2))
    points = [{"tokenizer": t, "vocab_size": v} for t in ("word", "bpe") for v in (300, 600)]
    on_gpu = {str(p): preflight.predict(trial_config(spec, p), device="cuda")[0] for p in points}
    assert req.predicted_bytes == max(on_gpu.values()) == on_gpu[str(req.point)]
    on_host = preflight.predict(trial_config(spec, req.point), device="cpu")[0]
    assert (req.kind, req.gpus, req.cpus) == ("cuda", 1, 2)
    assert req.mem_bytes == 2 * math.ceil(on_host * slurm.CALIBRATION_HEADROOM) + slurm.WORKER_BYTES
    with pytest.raises(SweepsError, match="--gpus-per-job must be >= 1"):
        slurm.plan_requests(spec, NODES, slurm.SlurmOptions(gpus_per_job=0))


def test_a_task_packs_what_slurm_gave_it(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "43")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "42")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "1024")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    pool = slurm.allocation_pool(_spec(corpus), None)
    (device,) = pool.devices
    assert device.capacity == 1024 * MiB - slurm.WORKER_BYTES and len(device.cores) == 1
    assert slurm.in_allocation() and slurm_job.trial_attrs() == {"slurm_job": "42_1"}
    monkeypatch.delenv("SLURM_JOB_ID")
    assert slurm_job.trial_attrs() == {}


@pytest.mark.parametrize(
    ("table", "cli", "error"),
    [
        ({}, {"jobs": 0}, "--jobs"),
        ({"gpus_per_job": -1}, {}, "--gpus-per-job"),
        ({"partition": "a b"}, {}, "--partition"),
        ({}, {"sbatch_args": ("constraint=a100",)}, "--sbatch-arg"),
    ],
)
def test_bad_options_are_one_line(table: dict, cli: dict, error: str) -> None:
    with pytest.raises(SweepsError, match=error):
        slurm.options_from(table, cli)


def test_the_spec_engine_table_is_checked(corpus: Path) -> None:
    data = spec_dict("sl", corpus)
    data["engine"] = {"name": "slurm", "partiton": "gpu"}
    with pytest.raises(SweepsError, match="did you mean 'partition'"):
        read_spec(data)


def test_states_and_reasons_from_scontrol(tmp_path: Path) -> None:
    log = tmp_path / "7_1.out"
    log.write_text("sweeps: slurm task 7_1\nerror: no study 'x' in sqlite:///a.db\n")
    text = (
        "JobId=8 ArrayJobId=7 ArrayTaskId=0 JobState=RUNNING Reason=None ExitCode=0:0 "
        "StdErr=/x\n"
        f"JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode "
        f"ExitCode=2:0 StdErr={log}\n"
        "JobId=7 ArrayJobId=7 ArrayTaskId=2-3 JobState=PENDING Reason=Resources "
        "ExitCode=0:0\n"
    )
    tasks = slurm.parse_jobs(text)
    assert [t.describe() for t in tasks] == [
        "task 7_0 running",
        "task 7_1 failed (NonZeroExitCode), exit 2:0: error: no study 'x' in sqlite:///a.db",
        "task 7_2-3 pending (Resources)",
    ]
    assert [t.ended for t in tasks] == [False, True, False]


def test_sinfo_lines() -> None:
    nodes = slurm.parse_sinfo(
        "n1|2|23849|gpu:2\nn2|64|512000|gpu:a100:4(S:0-1),tmp:1\nn3|8|1000|(null)\n"
    )
    assert nodes == [
        slurm.Node("n1", 2, 23849 * MiB, 2),
        slurm.Node("n2", 64, 512000 * MiB, 4),
        slurm.Node("n3", 8, 1000 * MiB, 0),
    ]


def test_other_engines_refuse_slurm_flags(tmp_path: Path, corpus: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(toml_text(spec_dict("sl", corpus)))
    done = subprocess.run(
        [*SWEEPS, "run", str(spec), "--partition", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "error: --partition is an option of the Slurm engine; add --engine slurm"
    )


# --- a real one-node cluster ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    why = slurm_cluster.missing()
    if why:
        pytest.skip(why)
    with slurm_cluster.one_node_cluster(tmp_path_factory.mktemp("slurm")) as c:
        before = os.environ.get("SLURM_CONF")
        os.environ.update(c.env)  # for the engine's functions called in this process
        try:
            yield c
        finally:
            if before is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = before


def _env(cluster: slurm_cluster.Cluster, url: str) -> dict[str, str]:
    return {**os.environ, **CHILD_ENV, **cluster.env, "SWEEPS_STORAGE": url}


def _write_spec(
    tmp_path: Path, corpus: Path, name: str, n_trials: int, max_tokens: int = 4000
) -> Path:
    data = spec_dict(
        name,
        corpus,
        fixed={"tokenizer": "word", "max_tokens": max_tokens},
        space={
            "vocab_size": {"choices": [300, 600]},
            "lr": {"low": 1e-3, "high": 1e-2, "log": True},
        },
        study={"n_trials": n_trials},
        limits={"max_wall_s": 600, "collapse": False},
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(toml_text(data))
    return path


def _check_exact(url: str, name: str, n_trials: int) -> list:
    trials = study_trials(url, name)
    state = wk.budget_state(trials, n_trials)
    assert state.done and state.finished == n_trials, [(t.number, t.state) for t in trials]
    complete = [t for t in state.in_budget if t.user_attrs.get("outcome") == "complete"]
    assert len(complete) == n_trials, [
        (
            t.number,
            t.state.name,
            t.user_attrs.get("slurm_job"),
            t.user_attrs.get("reason"),
            t.system_attrs.get("retry_history"),
        )
        for t in trials
    ]
    # None twice: no two counted trials trained the same configuration to completion.
    assert len({tuple(sorted(t.params.items())) for t in complete}) == n_trials, [
        (
            t.number,
            t.state.name,
            t.user_attrs.get("slurm_job"),
            t.user_attrs.get("reason"),
            t.system_attrs.get("retry_history"),
            t.params,
        )
        for t in trials
    ]
    assert all(re.fullmatch(r"\d+_\d", t.user_attrs.get("slurm_job", "")) for t in complete)
    return trials


@pytest.mark.slow
def test_a_study_through_a_two_task_array(
    cluster, pg_url: str, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The happy path on a real Slurm, which the script tests above only print: one array of
    two tasks, its --mem as Slurm holds it covering the largest predicted point, a declared GPU
    per task, exactly n_trials each tagged with its task, shown by ``sweeps trials``. Four short
    trials: two per task, so both tasks claim more than once."""
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")  # predicted here as by the CLI (CHILD_ENV)
    spec = _write_spec(tmp_path, corpus, "slarray", 4)
    done = subprocess.run(
        [
            *SWEEPS,
            "run",
            str(spec),
            "--engine",
            "slurm",
            "--jobs",
            "2",
            "--gpus-per-job",
            "1",
            "--heartbeat",
            "2",
            "--grace",
            "20",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env=_env(cluster, pg_url),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:] + cluster.logs()
    job = re.search(r"submitted Slurm job (\d+): 2 task\(s\), each --mem (\d+)M", done.stderr)
    assert job, done.stderr[-2000:]
    trials = _check_exact(pg_url, "slarray", 4)
    assert {t.user_attrs["slurm_job"].split("_")[0] for t in trials} == {job.group(1)}
    # --mem as Slurm holds it: at least the largest point's predicted peak.
    shown = cluster.run("scontrol", "-o", "show", "job", job.group(1))
    mems = {int(m) for m in re.findall(r"MinMemoryNode=(\d+)M", shown)}
    predicted = slurm.plan_requests(
        load_spec(spec), slurm.partition_nodes(None), slurm.SlurmOptions()
    ).predicted_bytes
    assert mems == {int(job.group(2))} and min(mems) * MiB >= predicted
    # Each task had its own declared GPU.
    logs = sorted((tmp_path / "runs" / "slarray" / "slurm").glob("*.out"))
    seen = {re.search(r"CUDA_VISIBLE_DEVICES=(\S*)", p.read_text()).group(1) for p in logs}
    assert len(logs) == 2 and seen == {"0", "1"}, [p.read_text()[-500:] for p in logs]
    shown = subprocess.run(
        [*SWEEPS, "trials", "slarray"],
        cwd=tmp_path,
        env=_env(cluster, pg_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"{job.group(1)}_" in shown.stdout and "slurm job" in shown.stdout


@pytest.mark.slow
def test_scancel_of_a_task_and_ctrl_c_then_resume(
    cluster, pg_url: str, tmp_path: Path, corpus: Path
) -> None:
    """The two stops a Slurm user makes, on a real array: ``scancel`` of one task (Slurm's
    SIGTERM: its worker interrupts and re-queues its trial, the other task trains it), then
    Ctrl-C of ``sweeps run`` (the whole array cancelled, exit 130, nothing left RUNNING), and a
    second run resuming to exactly n_trials. Four trials: the victim, the other task's first,
    the victim's retry and the one the Ctrl-C interrupts; each ~5 s, long enough to be caught
    training (the test acts as soon as a trial is RUNNING)."""
    name, n = "slcancel", 4
    spec = _write_spec(tmp_path, corpus, name, n, max_tokens=150_000)
    argv = [
        *SWEEPS,
        "run",
        str(spec),
        "--engine",
        "slurm",
        "--jobs",
        "2",
        "--heartbeat",
        "2",
        "--grace",
        "20",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    env = _env(cluster, pg_url)
    run = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def running(but: str | None = None) -> optuna.trial.FrozenTrial | None:
        return next(
            (
                t
                for t in study_trials(pg_url, name)
                if t.state.name == "RUNNING" and t.user_attrs.get("slurm_job") not in (None, but)
            ),
            None,
        )

    try:
        victim = wait_for(running, 300, "a trial running in a Slurm task")
        task = victim.user_attrs["slurm_job"]
        cluster.run("scancel", task)

        def redone() -> optuna.trial.FrozenTrial | None:
            return next(
                (
                    t
                    for t in study_trials(pg_url, name)
                    if t.state.name == "COMPLETE"
                    and victim.number in t.system_attrs.get("retry_history", ())
                ),
                None,
            )

        again = wait_for(redone, 300, "the cancelled task's trial, re-queued and completed")
        assert again.user_attrs["slurm_job"] not in (None, task)
        # Ctrl-C while the other task trains: the array is cancelled, the run says so.
        wait_for(lambda: running(but=task), 300, "the other task's next trial")
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, err[-3000:]
    assert "cancelling Slurm job" in err and "resumes the study" in err
    assert all(t.ended for t in slurm.array_tasks(task.split("_")[0]) or []), err[-2000:]
    trials = study_trials(pg_url, name)
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert victim.number in wk.superseded_numbers(trials)
    assert wk.budget_state(trials, n).finished < n
    # The second run resumes: exactly n trials, the interrupted one trained again.
    second = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming study" in second.stderr
    _check_exact(pg_url, name, n)


@pytest.mark.slow
def test_what_slurm_refuses_is_one_line(
    cluster, pg_url: str, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")  # predicted here as by the CLI (CHILD_ENV)
    spec = _write_spec(tmp_path, corpus, "slbad", 2)
    env = _env(cluster, pg_url)
    base = [*SWEEPS, "run", str(spec), "--engine", "slurm", "--runs-dir", str(tmp_path / "r")]
    bad = subprocess.run(
        [*base, "--partition", "nope"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: Slurm lists no node in partition 'nope'; check --partition (sinfo)"
    ]
    assert "slbad" not in optuna.get_all_study_names(pg_url)  # nothing was created
    # The script for submitting by hand: the same requests, and no URL in it.
    shown = subprocess.run(
        [*SWEEPS, "slurm-script", str(spec), "--jobs", "3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    requests = slurm.plan_requests(
        load_spec(spec), slurm.partition_nodes(None), slurm.SlurmOptions()
    )
    assert "#SBATCH --array=0-2\n" in shown.stdout
    assert re.findall(r"#SBATCH --mem=(\d+)M", shown.stdout) == [str(requests.mem_mib)], (
        shown.stdout
    )
    assert "postgresql" not in shown.stdout and "\nexec " in shown.stdout
    # A task that dies at start (here: sbatch told not to pass the database URL on): the run
    # ends with one line naming the state, Slurm's reason and the task's last words.
    dead = subprocess.run(
        [*base, "--sbatch-arg=--export=NONE"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dead.returncode == 2 and "Traceback" not in dead.stderr, dead.stderr[-2000:]
    last = dead.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Slurm job ") and "failed (NonZeroExitCode), exit 1:0" in last
    assert "export SWEEPS_STORAGE=<the study database URL> before sbatch" in last


@pytest.mark.slow
def test_a_task_killed_outright_has_its_trial_requeued_after_the_grace(
    cluster, pg_url: str, tmp_path: Path, corpus: Path
) -> None:
    """Preemption or a lost node, as the study sees it: every process of one task SIGKILLed at
    once (no SIGTERM, so no worker marks its trial). The trial stays RUNNING until its
    heartbeat is older than the grace; then it is failed, re-queued and completed by the other
    task, and the run ends with exactly n_trials. The SIGTERM path is the test above's; this is
    the heartbeat path across Slurm tasks. Two trials (the victim and the other task's; the
    other task, its budget full, waits out the grace and trains the retry), a fast heartbeat
    and a short grace: what it waits for is the grace, not training."""
    name, n = "slkill", 2
    spec = _write_spec(tmp_path, corpus, name, n, max_tokens=100_000)
    argv = [
        *SWEEPS,
        "run",
        str(spec),
        "--engine",
        "slurm",
        "--jobs",
        "2",
        "--heartbeat",
        "1",
        "--grace",
        "8",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    run = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=_env(cluster, pg_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        victim = wait_for(
            lambda: next(
                (
                    t
                    for t in study_trials(pg_url, name)
                    if t.state.name == "RUNNING" and t.user_attrs.get("slurm_job")
                ),
                None,
            ),
            300,
            "a trial running in a Slurm task",
        )
        task = victim.user_attrs["slurm_job"]
        cluster.run("scancel", "--signal=KILL", "--full", task)
        _, err = run.communicate(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err[-3000:] + cluster.logs()
    trials = _check_exact(pg_url, name, n)
    killed = next(t for t in trials if t.number == victim.number)
    assert killed.state.name == "FAIL", (killed.state, killed.user_attrs.get("reason"))
    again = [t for t in trials if victim.number in t.system_attrs.get("retry_history", ())]
    assert len(again) == 1 and again[0].user_attrs["slurm_job"] != task, [
        (t.number, t.state.name, t.user_attrs.get("slurm_job")) for t in again
    ]
