"""The live view: a study's report served on 127.0.0.1, drawn again as its trials finish.

``sweeps report STUDY --serve [--port N]``. The report is the file ``sweeps report`` writes
(``sweeps.report.build``), so the live view and the file never differ. A poller reads the
study's trial counts every ``POLL_S`` (how many trials there are and how many finished: one
``count`` query, ``sweeps.results.trial_counts``, through the read-only engine, which creates
and changes nothing) and rebuilds the page when they change. The page asks ``/version`` every
``REFRESH_S`` and reloads itself when the version moved, so a page left open shows a trial that
finished after it was opened within ``POLL_S + REFRESH_S`` plus the time one report takes to
build. The reload keeps the reader's place on the page (its scroll position, kept in the tab's
``sessionStorage``). A page whose server went away stays as it is, and keeps asking (it reloads
when a server there serves another version).

Only loopback is ever bound (``HOST``): the report holds the study's configuration and samples,
and the database URL (masked); serving it beyond the machine is a decision for a reverse proxy,
not a default. Ctrl-C or SIGTERM stops it cleanly: the server is shut down, the port freed, exit
0. The standard library's ``http.server`` in a thread: no dependency.
"""

from __future__ import annotations

import contextlib
import html
import http.server
import json
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from optuna.trial import TrialState

from lm.errors import SweepsError
from sweeps import results as results_mod
from sweeps.storage import describe_error

HOST = "127.0.0.1"
#: The default port: 0, a free one the system picks (printed at the start); --port N to fix it.
DEFAULT_PORT = 0
#: How often the database's trial counts are read (seconds).
POLL_S = 2.0
#: How often an open page asks whether the report changed (seconds).
REFRESH_S = 5.0
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)

#: Injected before ``</body>``: reload when the served version is not the page's own.
_LIVE_SCRIPT = """<script>
(function () {
  var version = %(version)d;
  var kept = sessionStorage.getItem("sweeps-live-scroll");
  if (kept !== null) {
    sessionStorage.removeItem("sweeps-live-scroll");
    window.addEventListener("load", function () { window.scrollTo(0, Number(kept)); });
  }
  function check() {
    fetch("/version", {cache: "no-store"}).then(function (r) { return r.json(); })
      .then(function (v) {
        if (v.version !== version) {
          sessionStorage.setItem("sweeps-live-scroll", String(window.scrollY));
          window.location.reload();
        }
      }).catch(function () {});
  }
  setInterval(check, %(period)d);
})();
</script>
"""


def trial_counts(storage: str, study: str) -> tuple[int, int]:
    """(trials, finished trials) of ``study``, read-only; ``SweepsError`` when it is not there."""
    counts = results_mod.trial_counts(storage, study)
    return sum(counts.values()), sum(counts.get(s, 0) for s in FINISHED)


def live_page(page: str, version: int, refresh_s: float = REFRESH_S) -> str:
    """The report's HTML with the script that reloads it when the served version changes."""
    script = _LIVE_SCRIPT % {"version": version, "period": int(refresh_s * 1000)}
    head, sep, tail = page.rpartition("</body>")
    return head + script + sep + tail if sep else page + script


@dataclass
class LiveReport:
    """The page being served and its version; ``refresh`` rebuilds it when the counts moved."""

    build: Callable[[], str]  # the report's HTML, drawn from the database
    counts: Callable[[], tuple[int, int]]  # what, when it changes, means a rebuild
    refresh_s: float = REFRESH_S
    version: int = 0
    seen: tuple[int, int] | None = None
    page: bytes = b""
    problem: str | None = None  # the last rebuild's error, shown on the terminal once
    served: int = 0  # how many times the page was sent (``/version`` says: a page is open)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> bool:
        """Rebuild if the counts changed since the last build; True when the page changed.
        The first call's errors are raised (a study that is not there: exit 2); later ones
        keep the page served and are recorded in ``problem`` (the database busy a moment)."""
        first = self.seen is None
        try:
            counts = self.counts()
            if counts == self.seen:
                return False
            text = self.build()
        except Exception as exc:  # a later rebuild: keep serving the last good page
            if first:
                raise
            self.problem = str(exc) if isinstance(exc, SweepsError) else describe_error(exc)
            return False
        with self.lock:
            self.version += 1
            self.page = live_page(text, self.version, self.refresh_s).encode("utf-8")
            self.seen = counts
            self.problem = None
        return True

    def current(self, *, view: bool = False) -> tuple[int, bytes]:
        """(version, page); ``view``: the page is being sent (counted in ``served``)."""
        with self.lock:
            self.served += view
            return self.version, self.page

    def state(self) -> dict[str, int]:
        """What ``/version`` answers: the page's version, the trial counts it was built from,
        and how many times it was served."""
        with self.lock:
            total, finished = self.seen or (0, 0)
            return {
                "version": self.version,
                "trials": total,
                "finished": finished,
                "served": self.served,
            }


def _handler(live: LiveReport) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", live.current(view=True)[1])
            elif path == "/version":
                self._send(200, "application/json", json.dumps(live.state()).encode("utf-8"))
            else:
                self._send(
                    404,
                    "text/html; charset=utf-8",
                    f"<p>Not found: {html.escape(path)}; the report is at "
                    '<a href="/">/</a>.</p>'.encode(),
                )

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            # the browser went away mid-page (a reload): nothing to tell
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass  # one line per request would bury the terminal's own lines

    return Handler


def serve(
    live: LiveReport,
    *,
    port: int = DEFAULT_PORT,
    poll_s: float = POLL_S,
    say: Callable[[str], None] = print,
) -> None:
    """Build the page, serve it on ``HOST:port`` and rebuild it as trials finish, until Ctrl-C
    or SIGTERM (then return normally). ``SweepsError`` when the study cannot be read or the
    port cannot be bound."""
    stop = threading.Event()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for s in previous:  # from here on a Ctrl-C is a stop, never a traceback
        signal.signal(s, on_signal)
    try:
        live.refresh()
        if not stop.is_set():
            _serve(live, port, poll_s, stop, say)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    say("stopped")


def _serve(
    live: LiveReport, port: int, poll_s: float, stop: threading.Event, say: Callable[[str], None]
) -> None:
    try:
        server = http.server.ThreadingHTTPServer((HOST, port), _handler(live))
    except OSError as exc:
        raise SweepsError(
            f"cannot serve on {HOST}:{port}: {exc.strerror or exc}; choose "
            "another --port (or --port 0 for a free one)"
        ) from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="sweeps-serve", daemon=True)
    thread.start()
    say(
        f"serving the report on http://{HOST}:{server.server_port}/ (rebuilt when trials "
        f"finish; the page refreshes itself every {live.refresh_s:g} s); Ctrl-C stops"
    )
    told = None
    try:
        while not stop.wait(poll_s):
            if live.refresh():
                total, finished = live.seen or (0, 0)
                say(f"report rebuilt: {finished} of {total} trials finished")
            elif live.problem and live.problem != told:  # each new problem once
                say(f"could not rebuild the report (still serving the last one): {live.problem}")
            told = live.problem
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def live_report(storage: str, studies: list[str], *, color_by: str | None = None) -> LiveReport:
    """The live report of one study (``sweeps.report.build``) or several on the same axes
    (``build_many``), rebuilt when any of their trial counts moves."""
    from sweeps import report as report_mod

    def build() -> str:
        if len(studies) == 1:
            return report_mod.build(storage, studies[0], color_by=color_by)[0]
        return report_mod.build_many(storage, studies)[0]

    def counts() -> tuple[int, int]:
        each = [trial_counts(storage, s) for s in studies]
        return sum(c[0] for c in each), sum(c[1] for c in each)

    return LiveReport(build=build, counts=counts)


def check_port(port: int) -> int:
    if not 0 <= port <= 65535:
        raise SweepsError(f"--port must be 0 to 65535 (0: a free one), got --port {port}")
    return port
