"""Acceptance: the report in a real browser, and optuna-dashboard on the same storage.

- A tiny real study (the runner, through ``sweeps run``: two trained trials and one
  ``predicted_oom``) on a text corpus full of ``<script>`` and ``<Q>`` text, reported with
  ``sweeps report`` and opened from ``file://`` in headless Chromium (Debian's ``chromium``,
  installed by the set-up step ``make system-packages``; skipped with the reason without it).
  ``--dump-dom`` after a virtual-time budget gives the DOM after every script ran: the report's
  own status element says how many charts rendered and which errors the page saw; every chart
  div must hold plotly's ``main-svg``; the samples table must show the markup as text. A
  screenshot is saved.
- The 2,000-trial study (written by the test) opens and renders every chart too.
- The starter, a quickstart-like and an ``[ablation]`` study (fabricated:
  ``tests.sweeps.report_kinds``) each show the sections that apply to them, by its table, and
  nothing else; screenshots of the three are saved under the test's temporary directory.
- ``optuna-dashboard`` serves the study over HTTP from the same database.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import numpy as np
import pytest

from tests.sweeps import fake_study, report_kinds
from tests.sweeps.ablation import FFN_WIDTH, store_ablation
from tests.sweeps.browser import CHROMIUM_FLAGS, chromium_path

PWNED = "<script>document.title='PWNED'</script>"
PROMPT = f"<Q>What does {PWNED} do?"


# --- Chromium -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser, installed by the set-up step (`make system-packages`, which `make test` and
    `.ci/run` run); a test never installs system packages itself."""
    return chromium_path()


def open_in_chromium(
    chromium: str, page: Path, tmp: Path, *, screenshot: Path | None = None, height: int = 6000
) -> str:
    """The DOM of ``page`` after its scripts ran (and a screenshot, if asked)."""
    base = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--virtual-time-budget=10000",
    ]
    proc = subprocess.run(
        [*base, "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout, proc.stderr[-2000:]
    if screenshot is not None:
        shot = subprocess.run(
            [
                *base,
                f"--window-size=1400,{height}",
                f"--screenshot={screenshot}",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert shot.returncode == 0 and screenshot.is_file(), shot.stderr[-2000:]
    return proc.stdout


def assert_rendered(dom: str, expected_charts: int) -> None:
    """No page errors; the status script ran; every chart div holds a rendered plotly SVG."""
    status = re.search(r'<div id="report-status"([^>]*)>', dom)
    assert status, "the report's status element is missing"
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', status.group(1)))
    errors = re.search(r'<pre id="report-errors">(.*?)</pre>', dom, re.S)
    assert attrs.get("data-state") == "done", attrs
    assert attrs.get("data-errors") == "0" and errors and not errors.group(1), errors
    assert attrs.get("data-charts") == attrs.get("data-rendered") == str(expected_charts), attrs
    parts = dom.split('<div class="chart" data-chart="')[1:]
    assert len(parts) == expected_charts
    for part in parts:
        body = part.split("</section>")[0]
        key = part.split('"')[0]
        assert 'class="main-svg"' in body, f"chart {key} did not render"


# --- a real study -------------------------------------------------------------------------------


SPEC = """
[study]
name = "browser"
objectives = ["val_bpb"]
sampler = "grid"
pruner = "none"

[corpus]
source = ["texts/*.txt"]
format = "text"
out = "corpus"

[fixed]
device = "cpu"
tokenizer = "word"
vocab_size = 300
d_model = 32
n_layers = 1
n_heads = 2
seq_len = 32
max_tokens = 8_000
warmup_tokens = 1_000
eval_every_tokens = 4_000
eval_tokens = 1_024
sample_tokens = 8
sample_prompts = [PROMPTS]

[space.batch_size]
choices = [8, 16, 65536]  # 65536 x 32 x 300 logits cannot fit: predicted_oom

[limits]
memory_budget = "1GiB"
"""


def write_corpus(texts: Path) -> None:
    """40 text files of Zipf-distributed pseudo-words, with markup and marker text mixed in."""
    rng = np.random.default_rng(0)
    syllables = ["ra", "to", "ki", "mo", "lu", "pe", "sa", "vi", "no", "de", "ga", "fu"]
    vocab = sorted(
        {"".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(2000)}
    )
    p = 1 / np.arange(1, len(vocab) + 1)
    p /= p.sum()
    markup = ["<script>alert(1)</script>", "<Q>", "<b>bold</b>", "&amp;"]
    texts.mkdir(parents=True)
    for i in range(40):
        lines = []
        for _ in range(60):
            words = list(rng.choice(vocab, size=int(rng.integers(5, 12)), p=p))
            if rng.random() < 0.3:
                words.insert(int(rng.integers(0, len(words))), str(rng.choice(markup)))
            lines.append(" ".join(words).capitalize() + "?")
        (texts / f"doc{i:02d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def sweeps_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def real_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("real_study")
    write_corpus(root / "texts")
    prompts = ", ".join(json.dumps(p) for p in (PROMPT, "<Q>"))
    (root / "spec.toml").write_text(SPEC.replace("PROMPTS", prompts), encoding="utf-8")
    url = f"sqlite:///{root / 'study.db'}"
    proc = sweeps_cli("run", "spec.toml", "--storage", url, "--runs-dir", "runs", cwd=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return root, url


@pytest.mark.slow
def test_a_real_study_report_renders_in_chromium(
    chromium: str, real_study: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = real_study
    out = tmp_path / "browser.html"
    proc = sweeps_cli("report", "browser", "--storage", url, "--out", str(out), cwd=root)
    assert proc.returncode == 0, proc.stderr
    source = out.read_text(encoding="utf-8")
    assert "predicted_oom: 1</span>" in source and "complete: 2</span>" in source
    expected = source.count('<div class="chart"')
    # everything but collapse (nothing collapsed) draws; one vocabulary: no vocabulary section
    assert expected >= 6 and 'data-chart="vocab"' not in source
    shot = tmp_path / "browser.png"
    dom = open_in_chromium(chromium, out, tmp_path, screenshot=shot)
    assert_rendered(dom, expected)
    # the markup in a prompt is text in the samples table, never run
    assert "<title>sweeps report: browser</title>" in dom
    table = dom.split('<table class="samples">')[1].split("</table>")[0]
    assert html.escape(PROMPT, quote=False) in table
    assert "<script" not in table
    assert "&lt;Q&gt;" in table
    print(f"\nscreenshot: {shot}")


@pytest.mark.slow
def test_a_two_thousand_trial_report_opens_and_renders(
    chromium: str, tmp_path: Path, big_study: str
) -> None:
    url = big_study
    out = tmp_path / "big.html"
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps", "report", "big", "--storage", url, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    built = time.perf_counter() - started
    started = time.perf_counter()
    dom = open_in_chromium(chromium, out, tmp_path)
    opened = time.perf_counter() - started
    assert_rendered(dom, 10)  # every chart, collapse, compute and timeline (scaling: a note)
    assert dom.count("<tr>") > 30  # the samples table, thinned
    print(
        f"\n2,000 trials: `sweeps report` {built:.1f} s (with interpreter start), "
        f"{out.stat().st_size / 2**20:.2f} MiB; opened and rendered by Chromium in "
        f"{opened:.1f} s"
    )


@pytest.mark.slow
def test_a_two_study_report_renders_in_chromium(chromium: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    fake_study.fabricate(url, "first", 25, seed=4)
    fake_study.fabricate(url, "second", 40, seed=5)
    out = tmp_path / "two.html"
    proc = sweeps_cli(
        "report", "first", "second", "--storage", url, "--out", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    source = out.read_text(encoding="utf-8")
    assert source.count('<div class="chart"') == 3  # Pareto, vocabulary, learning curves
    dom = open_in_chromium(chromium, out, tmp_path, screenshot=tmp_path / "two.png")
    assert_rendered(dom, 3)
    assert "<code>first</code>, <code>second</code>" in dom


def test_an_ablation_report_renders_its_effects_in_chromium(chromium: str, tmp_path: Path) -> None:
    """The effects table, the forest plot and the replicate intervals, drawn by a browser."""
    url = f"sqlite:///{tmp_path / 'ffn.db'}"
    store_ablation(url, "ffn", FFN_WIDTH)
    out = tmp_path / "ffn.html"
    proc = sweeps_cli("report", "ffn", "--storage", url, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    source = out.read_text(encoding="utf-8")
    assert 'data-chart="forest"' in source and 'class="effects"' in source
    dom = open_in_chromium(chromium, out, tmp_path, screenshot=tmp_path / "ffn.png")
    assert_rendered(dom, source.count('<div class="chart"'))
    assert "cannot tell apart with n = 3" in dom


@pytest.mark.parametrize("kind", list(report_kinds.SECTIONS))
def test_each_kind_of_study_shows_the_sections_that_apply_in_chromium(
    chromium: str, kind: str, tmp_path: Path
) -> None:
    """Issue 38: no empty section, no placeholder, the memory map only where seq_len or batch
    varied; each section that applies renders; the screenshot is ``<kind>.png``."""
    url = f"sqlite:///{tmp_path / 'kind.db'}"
    name = report_kinds.store(url, kind)
    out = tmp_path / f"{kind}.html"
    proc = sweeps_cli("report", name, "--storage", url, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / f"{kind}.png"
    dom = open_in_chromium(chromium, out, tmp_path, screenshot=shot, height=4000)
    assert re.findall(r'<section id="([\w-]+)">', dom) == report_kinds.SECTIONS[kind]
    source = out.read_text(encoding="utf-8")
    assert_rendered(dom, source.count('<div class="chart"'))
    assert "Not an [ablation] study" not in dom and 'class="note"' not in dom
    labels = re.findall(r'<a href="#[\w-]+">([^<]*)</a>', dom.split("<nav>")[1].split("</nav>")[0])
    assert len(labels) == len(set(labels)) == len(report_kinds.SECTIONS[kind])
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshot: {shot}")


# --- optuna-dashboard -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dashboard_wsgi() -> object:
    """optuna-dashboard's WSGI app factory, pip-installed into this environment if missing."""
    if importlib.util.find_spec("optuna_dashboard") is None:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "optuna-dashboard"],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            pytest.skip(
                "optuna-dashboard is not installed and `pip install optuna-dashboard` "
                "failed (no network?)"
            )
        importlib.invalidate_caches()
    from optuna_dashboard import wsgi

    return wsgi


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dashboard(dashboard_wsgi: object, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(base URL, storage URL): optuna-dashboard serving a fabricated study on a free port."""
    import optuna

    url = f"sqlite:///{tmp_path / 'dash.db'}"
    fake_study.fabricate(url, "dash-study", 12, seed=6)
    storage = optuna.storages.RDBStorage(url)
    server = make_server("127.0.0.1", 0, dashboard_wsgi(storage), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", url
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        storage.engine.dispose()


def test_optuna_dashboard_serves_the_study(dashboard: tuple[str, str]) -> None:
    base, _ = dashboard
    with urllib.request.urlopen(f"{base}/api/studies", timeout=30) as response:
        assert response.status == 200
        studies = json.loads(response.read())
    names = [s["study_name"] for s in studies["study_summaries"]]
    assert names == ["dash-study"]
    study_id = studies["study_summaries"][0]["study_id"]
    with urllib.request.urlopen(f"{base}/api/studies/{study_id}?after=0", timeout=30) as response:
        detail = json.loads(response.read())
    assert len(detail["trials"]) == 12
    outcomes = {
        a["value"] for t in detail["trials"] for a in t["user_attrs"] if a["key"] == "outcome"
    }
    assert {"complete", "predicted_oom", "unigram_collapse"} <= outcomes
