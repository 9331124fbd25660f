"""The Ray engine: resource requests from predicted memory, and a real local cluster of simulated
nodes (different CPU counts, memory and declared GPUs) running a study on PostgreSQL.

Ray refuses 127.0.0.1 as a node address on a machine with another interface, so the cluster
runs inside a private network namespace this test makes (``unshare --net``, as root): there
loopback is Ray's only address, and PostgreSQL is reached through its unix socket. Skipped with
the reason where Ray is not installed or the namespace cannot be made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest

from lm.errors import SweepsError
from sweeps import admission as local
from sweeps import liveness, records
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.engines import ray as ray_engine
from sweeps.spec import Limits, read_spec
from tests.sweeps.helpers import spec_dict, study_trials
from tests.sweeps.pg import fresh_database

GiB = 2**30
REPO = Path(__file__).resolve().parents[2]
#: Set in the namespace: the inner test runs only there.
INNER_ENV = "SWEEPS_TEST_RAY_NETNS"
#: Two trials start at once (the head and "big"), the one on "big" is lost, and its retry and the
#: third run on the head: every path once, and no trial more.
N_TRIALS = 3


# --- requests (no Ray needed) --------------------------------------------------------------------


def test_requests_follow_the_prediction() -> None:
    cpu = ray_engine.request("cpu", 100 * 2**20, 2, None)
    assert cpu == {"num_cpus": 2, "memory": local.reservation(100 * 2**20)}
    gpu = ray_engine.request("cuda", 10 * GiB, 1, 100 * GiB)
    assert gpu["num_gpus"] == pytest.approx(0.11) and gpu["num_cpus"] == 1
    assert ray_engine.request("cuda", 200 * GiB, 1, 100 * GiB)["num_gpus"] == 1.0


def test_the_budget_is_the_largest_node() -> None:
    nodes = [
        ray_engine.Node("a", "10.0.0.1", 4, 0, 1 * GiB),
        ray_engine.Node("b", "10.0.0.2", 2, 2, 8 * GiB),
    ]
    pool = ray_engine.cluster_pool(nodes, "cpu", 1, None)
    budget = local.trial_budget(Limits(memory_budget="auto"), pool)
    assert local.reservation(budget) <= 8 * GiB < local.reservation(budget) + GiB
    assert ray_engine.device_kind(read_spec(spec_dict("k", Path("."))), nodes) == "cpu"
    gpu_pool = ray_engine.cluster_pool(nodes, "cuda", 1, 80 * GiB)
    assert [d.label for d in gpu_pool.devices] == ["10.0.0.2"]


class FakeRay:
    """What the engine calls of Ray, recorded: each remote's options and the tasks submitted;
    a task runs when its result is asked for."""

    class exceptions:  # Ray's own name
        class RayError(Exception):
            pass

        class GetTimeoutError(RayError, TimeoutError):
            pass

    def __init__(self, report: dict | None = None, timeout: bool = False) -> None:
        self.submitted: list[tuple[dict, tuple]] = []
        self.report, self.timeout = report, timeout

    def remote(self, fn=None, **options):
        if fn is None:
            return lambda f: FakeRemote(self, f, options)
        return FakeRemote(self, fn, options)

    def wait(self, refs, timeout=None):
        return refs, []

    def get(self, ref, timeout=None):
        if self.timeout:
            raise self.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")
        return ref()


class FakeRemote:
    def __init__(self, ray: FakeRay, fn, options: dict) -> None:
        self.ray, self.fn, self.opts = ray, fn, options

    def options(self, **options):
        return FakeRemote(self.ray, self.fn, {**self.opts, **options})

    def remote(self, *args):
        self.ray.submitted.append((self.opts, args))
        if self.fn is ray_engine.run_on_node:
            return lambda: self.ray.report
        return lambda: self.fn(*args)


def test_gpu_memory_is_read_by_a_task_that_needs_no_free_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lm import host

    nodes = [
        ray_engine.Node("a", "10.0.0.1", 4, 0, GiB),
        ray_engine.Node("b", "10.0.0.2", 16, 8, 64 * GiB),
    ]
    monkeypatch.setattr(
        host, "gpu_memory", lambda gpu: host.parse_gpu_memory("1024, 143771\n")
    )  # a busy H200
    fake = FakeRay()
    assert ray_engine._gpu_bytes(fake, nodes) == 143771 * 2**20
    ((options, _),) = fake.submitted
    assert options["num_gpus"] == 0 and options["num_cpus"] == 0
    assert options["resources"] == {"node:10.0.0.2": 0.001}  # on a GPU node
    with pytest.raises(SweepsError, match=r"cannot read the GPU memory of Ray node 10\.0\.0\.2"):
        ray_engine._gpu_bytes(FakeRay(timeout=True), nodes)
    monkeypatch.setattr(host, "gpu_memory", lambda gpu: None)
    with pytest.raises(SweepsError, match="nvidia-smi"):
        ray_engine._gpu_bytes(FakeRay(), nodes)


def test_the_node_plans_with_the_drivers_factor_and_a_rejected_trial_stays_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A node re-planned with its own, fresh calibration (it could launch what the driver
    rejected, or the reverse), and a rejected trial went out as a task with no CPU and an
    empty CUDA_VISIBLE_DEVICES."""
    import contextlib
    import dataclasses

    from sweeps import preflight
    from sweeps.runner import RunnerContext, TrialReport, WorkerDevice

    spec = read_spec(spec_dict("r", Path("/nonexistent-corpus")), check_paths=False)
    study = optuna.create_study()
    monkeypatch.setattr(preflight, "calibration_factor", lambda study: 1.3)
    monkeypatch.setattr(liveness, "heartbeat", lambda storage, trial_id: contextlib.nullcontext())
    here: list[tuple[int, float | None]] = []
    monkeypatch.setattr(
        ray_engine,
        "run_trial",
        lambda ctx, device, trial, calibration=None: (
            here.append((trial.number, calibration))
            or TrialReport(trial.number, "predicted_oom", "too big")
        ),
    )

    def runner(budget: int | None) -> tuple[FakeRay, TrialReport]:
        report = dataclasses.asdict(TrialReport(0, "complete", "ok", [1.0]))
        fake = FakeRay(report)
        ctx = RunnerContext(
            spec=spec,
            study=study,
            storage=None,
            study_dir=tmp_path,
            launcher=None,
            budget_bytes=budget,
        )
        run = ray_engine._trial_runner(fake, {"kind": "cpu"}, "cpu", 1, None)
        return fake, run(ctx, WorkerDevice("cpu"), study.ask())

    fake, report = runner(budget=None)  # fits: a task, carrying the driver's factor
    ((options, (task,)),) = fake.submitted
    assert task["calibration"] == 1.3 and options["num_cpus"] == 1 and report.outcome == "complete"
    assert here == []
    fake, report = runner(budget=1)  # fits nowhere: recorded here, no task
    assert fake.submitted == [] and here == [(1, 1.3)] and report.outcome == "predicted_oom"


def test_a_trial_no_node_can_take_is_recorded_by_the_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, corpus: Path
) -> None:
    """The driver's own context (run_on_cluster's) records a trial that fits no node as
    predicted_oom: it had no launcher, and planning the trial raised AttributeError."""
    from sweeps.runner import run_trial
    from tests.sweeps.helpers import CPU, worker_study

    spec = read_spec(spec_dict("rejected", corpus), source=tmp_path / "spec.toml")
    storage, study = worker_study(spec, tmp_path / "sweeps.db")
    study.enqueue_trial({"tokenizer": "bpe", "vocab_size": 600})
    node = ray_engine.Node("n1", "127.0.0.1", 1.0, 0.0, 64 * 2**20)
    monkeypatch.setattr(ray_engine, "import_ray", FakeRay)
    monkeypatch.setattr(ray_engine, "alive_nodes", lambda ray: [node])
    monkeypatch.setattr(local, "trial_budget", lambda limits, pool: 64 * 2**20)
    contexts: list = []
    monkeypatch.setattr(wk, "run_threads", lambda ctx, *args: contexts.append(ctx) or [])
    options = wk.RunOptions(n_workers=1)
    ray_engine.run_on_cluster(spec, storage, study, "sqlite://", tmp_path / "runs", options)
    report = run_trial(contexts[0], CPU, study.ask())
    assert report.outcome == "predicted_oom", report.reason


# --- a cluster in a network namespace ------------------------------------------------------------


def _namespace_or_skip() -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("a private network namespace needs root, unshare and ip")
    probe = subprocess.run(
        ["unshare", "--net", "ip", "link", "set", "lo", "up"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {probe.stderr.strip()[:200]}")


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.study
@pytest.mark.server
def test_a_cluster_places_by_memory_and_requeues_a_lost_node(tmp_path: Path, corpus: Path) -> None:
    """What only a real Ray cluster shows (the tests above fake Ray): the nodes as Ray lists
    them, trials placed by predicted memory (never on the node with cores but too little
    memory), and a node removed mid-trial: its trial failed as lost, re-queued once, and the
    study ending with exactly n_trials complete. The cluster (three raylets) is most of the
    cost, so the study is the smallest that takes every path: three trials, each just long
    enough to be caught running with an evaluation on the node that is then removed."""
    _namespace_or_skip()
    with fresh_database("sweeps_ray") as url:
        socket_url = f"postgresql://{url.username}@/{url.database}?host=/var/run/postgresql"
        env = {
            **os.environ,
            INNER_ENV: "1",
            "SWEEPS_TEST_RAY_URL": socket_url,
            "SWEEPS_TEST_RAY_DIR": str(tmp_path),
            "SWEEPS_TEST_RAY_CORPUS": str(corpus),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        inner = f"{Path(__file__).relative_to(REPO)}::test_inside_the_namespace"
        done = subprocess.run(
            [
                "unshare",
                "--net",
                "sh",
                "-c",
                f'ip link set lo up && exec "$0" -m pytest -q -x -p no:cacheprovider -s {inner}',
                sys.executable,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "1 passed" in done.stdout, done.stdout[-2000:]
        trials = study_trials(url.render_as_string(hide_password=False), "ray")
        state = wk.budget_state(trials, N_TRIALS)
        assert state.done and state.finished == N_TRIALS
        assert (
            sum(t.user_attrs.get("outcome") == "complete" for t in state.in_budget) == N_TRIALS
        ), [t.user_attrs.get("reason") for t in trials]
        assert len(wk.superseded_numbers(trials)) == 1  # the trial the lost node held


@pytest.mark.cluster
def test_inside_the_namespace() -> None:
    if os.environ.get(INNER_ENV) != "1":
        pytest.skip("runs inside the network namespace the test above makes")
    import ray
    from ray.cluster_utils import Cluster

    tmp, url = Path(os.environ["SWEEPS_TEST_RAY_DIR"]), os.environ["SWEEPS_TEST_RAY_URL"]
    data = spec_dict(
        "ray",
        Path(os.environ["SWEEPS_TEST_RAY_CORPUS"]),
        fixed={"tokenizer": "word", "max_tokens": 150_000, "eval_every_tokens": 20_000},
        space={"vocab_size": {"choices": [300, 600]}},
        study={"n_trials": N_TRIALS},
        limits={"collapse": False, "memory_budget": "auto"},
    )
    spec = read_spec(data)
    # The head and "big" hold a trial; "small" has more cores but too little memory for any.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "memory": 3 * GiB})
    small = cluster.add_node(num_cpus=2, memory=64 * 2**20)
    big = cluster.add_node(num_cpus=1, memory=3 * GiB, num_gpus=2)
    try:
        with ray_engine.connect(cluster.address) as info:
            assert {n.address for n in info.nodes} == {"127.0.0.1"} and len(info.nodes) == 3
            assert info.log_dir and "dashboard" in info.describe()
            _run_and_lose_a_node(ray, cluster, spec, url, tmp, big, small)
    finally:
        cluster.shutdown()


def _run_and_lose_a_node(ray, cluster, spec, url, tmp, big, small) -> None:
    storage = st.open_storage(url, heartbeat_interval=2, grace_period=30)
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    out: list = []
    options = wk.RunOptions(n_workers=None)
    runner = threading.Thread(
        target=lambda: out.append(
            ray_engine.run_on_cluster(
                spec, storage, study, url, tmp / "runs" / "ray", options, beats=(2, 30)
            )
        )
    )
    runner.start()
    on_big = f"node {big.node_id[:8]} cpu"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        running = [
            t
            for t in study.get_trials(deepcopy=False)
            if t.state.name == "RUNNING" and t.user_attrs.get("placed_on") == on_big
        ]
        if (
            running
            and records.read_evals(storage, "ray")
            and any(
                e["trial_number"] == running[0].number for e in records.read_evals(storage, "ray")
            )
        ):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("no trial ran on the big node")
    cluster.remove_node(big)
    runner.join(420)
    assert not runner.is_alive() and out and all(r.error is None for r in out[0])
    trials = study.get_trials()
    placed = {t.user_attrs.get("placed_on") for t in trials if t.user_attrs.get("placed_on")}
    assert f"node {small.node_id[:8]} cpu" not in placed and on_big in placed
    lost = [t for t in trials if "lost" in str(t.user_attrs.get("reason"))]
    assert len(lost) == 1 and lost[0].state.name == "FAIL"
