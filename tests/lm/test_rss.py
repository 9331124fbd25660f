"""lm.rss: the CPU peak counts anonymous memory, not file-backed pages (Linux)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lm.rss import child_peak_rss_bytes, peak_anon_bytes, peak_rss_bytes, status_bytes

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's"
)

# A fresh interpreter (a low high-water mark) maps a file and reads every page of it, then
# allocates and touches anonymous memory; it reports both peaks after each step.
CHILD = """
import json, mmap, sys
from lm.rss import peak_anon_bytes, peak_rss_bytes
out = {"start": (peak_rss_bytes(), peak_anon_bytes())}
with open(sys.argv[1], "rb") as fh:
    m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    total = sum(m[i] for i in range(0, len(m), 4096))
    out["file"] = (peak_rss_bytes(), peak_anon_bytes())
    block = bytearray(64 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    out["anon"] = (peak_rss_bytes(), peak_anon_bytes())
    m.close()
print(json.dumps(out))
"""


def test_file_backed_pages_raise_the_resident_peak_but_not_the_anonymous_one(
    tmp_path: Path,
) -> None:
    data = tmp_path / "tokens.bin"
    data.write_bytes(b"\1" * (96 * MIB))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(data)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = {k: tuple(v) for k, v in json.loads(proc.stdout).items()}
    (rss0, anon0), (rss1, anon1), (rss2, anon2) = out["start"], out["file"], out["anon"]
    assert rss1 - rss0 > 80 * MIB  # the mapped file's pages are resident ...
    assert anon1 - anon0 < 8 * MIB  # ... and not anonymous
    assert anon2 - anon1 > 60 * MIB  # a touched 64 MiB buffer is
    assert anon2 <= rss2


def test_status_fields_and_the_peaks_of_this_process() -> None:
    status = status_bytes("VmHWM", "RssAnon", "RssFile", "VmData", "NoSuchField")
    assert {"VmHWM", "RssAnon", "RssFile", "VmData"} <= set(status)
    assert "NoSuchField" not in status
    assert 0 < peak_anon_bytes() <= peak_rss_bytes()


def test_a_child_peak_is_read_while_it_lives_and_none_once_it_is_gone() -> None:
    """What the parent samples of its trial's child (``sweeps.monitor``)."""
    code = (
        "import sys; block = bytearray(64 * 2**20); sys.stdout.write('ok'); "
        "sys.stdout.flush(); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.read(2) == b"ok"
        peak = child_peak_rss_bytes(child.pid)
        assert peak is not None and peak > 60 * MIB
    finally:
        child.communicate(b"")
    assert child_peak_rss_bytes(child.pid) is None  # reaped: no /proc entry


# A process that once held 400 MiB starts a small child: the child's own peak is small.
PARENT = """
import subprocess, sys
block = bytearray(400 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
del block
code = "import resource; from lm.rss import peak_rss_bytes as p; print(p(), " \\
       "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                     check=True).stdout)
"""


def test_a_child_does_not_report_its_parents_peak() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PARENT],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    own, maxrss = map(int, proc.stdout.split())
    assert own < 100 * MIB
    # ru_maxrss carries the exec'ed-over address space's peak: why peak_rss_bytes avoids it.
    assert maxrss > 400 * MIB
