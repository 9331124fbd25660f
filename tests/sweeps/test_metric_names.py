"""Optuna's own tools name a study's objectives as its spec does (``val_bpb``, ``peak_mem``), not
"Objective 0": read back through Optuna's public API and its CLI in a fresh process, and through
optuna-dashboard's API (skipped with the reason where optuna-dashboard is not installed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import optuna
import pytest

from sweeps import storage as st
from sweeps import study as service
from sweeps import workers as wk
from sweeps.spec import read_spec
from tests.sweeps.helpers import spec_dict

OBJECTIVES = [
    {"metric": "val_bpb", "direction": "minimize"},
    {"metric": "peak_mem", "direction": "minimize"},
]
NAMES = ["val_bpb", "peak_mem"]


def created_by_the_tool(tmp_path: Path, name: str = "named") -> str:
    """A study created as ``sweeps run`` creates it (``sweeps.study.open_study``), with one
    finished trial (so ``optuna trials`` has values to name); its URL."""
    url = f"sqlite:///{tmp_path / 'named.db'}"
    spec = read_spec(spec_dict(name, tmp_path, study={"objectives": OBJECTIVES}), check_paths=False)
    storage, study, created = service.open_study(spec, url, n_trials=None, heartbeat=10, grace=60)
    assert created
    study.add_trial(optuna.trial.create_trial(values=[2.1, 3e8]))
    storage.engine.dispose()
    return url


def in_a_fresh_process(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_optunas_api_and_cli_name_the_objectives(tmp_path: Path) -> None:
    url = created_by_the_tool(tmp_path)
    shown = in_a_fresh_process(
        "import json, optuna; "
        f"print(json.dumps(optuna.load_study(study_name='named', storage={url!r}).metric_names))"
    )
    assert json.loads(shown) == NAMES
    optuna_cli = Path(sys.executable).parent / "optuna"
    proc = subprocess.run(
        [str(optuna_cli), "trials", "--study-name", "named", "--storage", url, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    finished = [t for t in json.loads(proc.stdout) if t["state"] == "COMPLETE"]
    assert [t["values"] for t in finished] == [{"val_bpb": 2.1, "peak_mem": 3e8}]


def test_a_study_without_names_gets_them_when_the_tool_opens_it(tmp_path: Path) -> None:
    """A study created before the tool named its metrics: a worker joining it names them."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    spec = read_spec(
        spec_dict("old", tmp_path, study={"objectives": OBJECTIVES}), check_paths=False
    )
    storage = st.open_storage(url)
    optuna.create_study(study_name="old", storage=storage, directions=spec.study.directions)
    assert optuna.load_study(study_name="old", storage=storage).metric_names is None
    assert wk.load_for_workers(spec, storage).metric_names == NAMES
    storage.engine.dispose()
    shown = in_a_fresh_process(
        "import json, optuna; "
        f"print(json.dumps(optuna.load_study(study_name='old', storage={url!r}).metric_names))"
    )
    assert json.loads(shown) == NAMES


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_optuna_dashboards_api_names_the_objectives(tmp_path: Path) -> None:
    if importlib.util.find_spec("optuna_dashboard") is None:
        pytest.skip(
            "optuna-dashboard is not installed (it is in the dev extra: pip install -e '.[dev]')"
        )
    from optuna_dashboard import wsgi

    url = created_by_the_tool(tmp_path)
    storage = optuna.storages.RDBStorage(url)
    server = make_server("127.0.0.1", 0, wsgi(storage), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        with urllib.request.urlopen(f"{base}/api/studies", timeout=30) as response:
            [summary] = json.loads(response.read())["study_summaries"]
        with urllib.request.urlopen(
            f"{base}/api/studies/{summary['study_id']}?after=0", timeout=30
        ) as response:
            detail = json.loads(response.read())
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        storage.engine.dispose()
    assert detail["objective_names"] == NAMES
