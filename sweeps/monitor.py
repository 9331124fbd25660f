"""Watch one trial's child from its launch to its end, and say how it ended.

``Monitor`` polls (the child's log is never parsed):

- ``metrics.jsonl``, followed line by line (``MetricsFollower``): each new evaluation goes to the
  runner's callback, which records it and asks the judge (``sweeps.judge``); a verdict stops
  the child;
- the user's stop request (``StopFlags.stop``) and the wall-clock limit (``hard_wall_s``): the
  child's group gets SIGTERM, then SIGKILL after ``term_grace_s``; ``StopFlags.kill``: SIGKILL
  at once;
- the child's start-up times (``StartTimes``), its progress in tokens, and its peak resident
  set (``lm.rss.child_peak_rss_bytes``), sampled while it is alive: the measured peak of a
  child that dies before writing its own.

``Monitor.ending`` then reads ``result.json`` and classifies the ending (``classify``): the
parent's own decision first, then the child's result, then its exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm import host, outcomes, rss
from lm.run_files import (
    LOG_FILE,
    METRICS_FILE,
    RESULT_FILE,
    TOKENIZER_FILE,
    check_metrics_row,
    loads_child,
    read_progress_tokens,
    read_result_dict,
    record_verdict,
)
from sweeps.launchers import Child
from sweeps.spec import Limits
from sweeps.verdicts import Verdict

#: How often the parent looks at a running child (seconds).
POLL_S = 0.2
#: How long a child has between SIGTERM and SIGKILL (seconds): time to write its result.
TERM_GRACE_S = 10.0

Row = dict[str, Any]
#: The runner's callback for each new evaluation: (the row, the history up to it) -> a verdict
#: that stops the child, or None.
OnEval = Callable[[Row, list[Row]], Verdict | None]


@dataclass
class StopFlags:
    """``stop``: launch nothing more, stop running children (SIGTERM, grace, SIGKILL) and mark
    their trials interrupted; ``kill``: SIGKILL at once."""

    stop: threading.Event = field(default_factory=threading.Event)
    kill: threading.Event = field(default_factory=threading.Event)


def hard_wall_s(limits: Limits) -> float | None:
    """When the parent stops a child itself: the child enforces ``max_wall_s`` on its training
    loop; start-up, the last evaluation and writing the result get a margin on top."""
    if limits.max_wall_s is None:
        return None
    return limits.max_wall_s * 1.25 + 60.0


class MetricsFollower:
    """Complete new lines of a growing JSON-lines file, by polling, each checked as a metrics row
    (``lm.run_files.check_metrics_row``): a line that is not a JSON object is skipped, a value of
    the wrong type dropped, and both noted in ``problems``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.problems: list[str] = []

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()  # an incomplete last line waits for the next poll
        rows = []
        for line in lines:
            if not line.strip():
                continue
            try:
                value = loads_child(line)
            except ValueError as exc:  # not JSON, or too deep (UnicodeDecodeError is one)
                self.problems.append(
                    f"a {METRICS_FILE} line is not JSON ({str(exc)[:80]}): {line[:60]!r}"
                )
                continue
            row, problems = check_metrics_row(value)
            self.problems += problems
            if row is not None:
                rows.append(row)
        return rows


class StartTimes:
    """How long a child took to get going, from its own files (it records no timestamp of its
    first step).

    - ``setup_s``: launch -> ``tokenizer.json`` written (config read, imports done, token cache
      mapped; the child builds its model next).
    - ``cold_start_s``: launch -> first training step, plus the first evaluation: the mtime of
      ``metrics.jsonl`` when its first row is seen, minus the child's own time in its training
      loop up to that row (tokens / tokens_per_s). The tightest bound the files give; with a
      small evaluation it is the start-up cost of a trial.
    """

    def __init__(self, run_dir: Path, launched_at: float) -> None:
        self.run_dir = run_dir
        self.launched_at = launched_at
        self.setup_s: float | None = None
        self.cold_start_s: float | None = None

    def poll(self) -> None:
        if self.setup_s is None:
            with contextlib.suppress(OSError):
                mtime = (self.run_dir / TOKENIZER_FILE).stat().st_mtime
                self.setup_s = max(0.0, mtime - self.launched_at)

    def on_rows(self, rows: list[dict[str, Any]]) -> None:
        if self.cold_start_s is not None or not rows:
            return
        last = rows[-1]  # the file's mtime is that of the newest row read
        tokens, tps = last.get("tokens"), last.get("tokens_per_s")
        with contextlib.suppress(OSError, TypeError, ZeroDivisionError):
            written = (self.run_dir / METRICS_FILE).stat().st_mtime
            # a missing value is None: the TypeError is suppressed above
            self.cold_start_s = max(0.0, written - self.launched_at - float(tokens) / float(tps))  # type: ignore[arg-type]


@dataclass
class Attempt:
    """One launch of a trial's child and what came of it."""

    outcome: str
    reason: str
    result: dict[str, Any] | None
    history: list[dict[str, Any]]
    wall_s: float
    times: StartTimes
    peak_rss: int | None
    child_pid: int | None
    returncode: int | None
    #: What was wrong in the child's files (skipped lines, dropped values), for the record.
    problems: list[str] = field(default_factory=list)
    #: Why the run dir could not be written when the child left no result (a full disk): the
    #: environment's failure, whatever the child's exit code (``run_dir_unwritable``).
    unwritable: str | None = None


class Monitor:
    """One child, watched until it exits (``run``), then its ending read (``ending``).

    ``launched_at`` (wall clock) and ``started`` (monotonic) are taken just before the launch:
    the start-up times and the wall time count the launch itself.
    """

    def __init__(
        self,
        child: Child,
        run_dir: Path,
        *,
        launched_at: float,
        started: float,
        flags: StopFlags,
        limits: Limits,
        poll_s: float = POLL_S,
        term_grace_s: float = TERM_GRACE_S,
        threads: int = 1,
    ) -> None:
        self.child, self.run_dir = child, run_dir
        self.threads = threads  # the child's intra-op threads, for a timeout's CPU share
        self.started, self.flags, self.limits = started, flags, limits
        self.poll_s, self.term_grace_s = poll_s, term_grace_s
        self.wall_limit = hard_wall_s(limits)
        self.follower = MetricsFollower(run_dir / METRICS_FILE)
        self.times = StartTimes(run_dir, launched_at)
        self.history: list[Row] = []
        #: The judge's verdict (no more evaluations are read after one), and the reason the
        #: parent stopped the child (that verdict, the user's stop, or the wall-clock limit).
        self.verdict: Verdict | None = None
        self.stopped: Verdict | None = None
        self.term_at: float | None = None
        self.killed = False
        self.peak: int | None = None
        self.rc: int | None = None
        self.progress_tokens: int | None = None

    def run(self, on_eval: OnEval, on_progress: Callable[[int], None]) -> None:
        """Poll until the child exits: evaluations to ``on_eval``, new token counts of its
        progress file to ``on_progress``; stop it on a verdict, a stop request or the limit."""
        while True:
            self.rc = self.child.poll()
            if self.verdict is None:
                rows = self.follower.read()
                self.times.on_rows(rows)
                for row in rows:
                    if row.get("read") is None:  # a cooldown read is no point of the run
                        self.history.append(row)
                    self.verdict = on_eval(row, self.history)
                    if self.verdict is not None:
                        break
            if self.rc is not None:
                return
            self._stop_or_kill(time.monotonic())
            self.times.poll()
            seen = read_progress_tokens(self.run_dir)
            if seen is not None and seen != self.progress_tokens:
                self.progress_tokens = seen
                on_progress(seen)
            sampled = rss.child_peak_rss_bytes(self.child.pid)
            if sampled is not None:
                self.peak = max(self.peak or 0, sampled)
            time.sleep(self.poll_s)

    def _stop_or_kill(self, now: float) -> None:
        """SIGTERM the child's group once, for the first reason to stop it; SIGKILL after the
        grace period, or at once on a kill request."""
        if self.stopped is None:
            if self.verdict is not None:
                self.stopped = self.verdict
            elif self.flags.stop.is_set():
                self.stopped = Verdict(
                    outcomes.INTERRUPTED,
                    "stopped by the user (Ctrl-C or SIGTERM) before it finished",
                )
            elif self.wall_limit is not None and now - self.started > self.wall_limit:
                cpu = host.cpu_time_text(
                    host.process_cpu_s(self.child.pid), now - self.started, self.threads
                )
                self.stopped = Verdict(
                    outcomes.TIMEOUT,
                    f"still running {self.wall_limit:g} s "
                    "after launch (limits.max_wall_s "
                    f"{self.limits.max_wall_s:g} plus a margin); {cpu}",
                )
            if self.stopped is not None:
                self.child.signal(signal.SIGTERM)
                self.term_at = now
        if not self.killed and (
            self.flags.kill.is_set()
            or (self.term_at is not None and now - self.term_at > self.term_grace_s)
        ):
            self.child.signal(signal.SIGKILL)
            self.killed = True

    def ending(self) -> Attempt:
        """How the attempt ended, once the child is gone; the run dir's ``result.json`` gets the
        parent's verdict when it differs from the child's."""
        wall_s = time.monotonic() - self.started
        run_dir, rc, stopped, verdict = self.run_dir, self.rc, self.stopped, self.verdict
        if (
            stopped is None
            and getattr(self.child, "lost", False)
            and not (run_dir / RESULT_FILE).exists()
        ):
            stopped = Verdict(outcomes.CRASHED, "the fork server ended while the trial ran")
        if stopped is None and verdict is not None and verdict.outcome != outcomes.PRUNED:
            # The last evaluation broke a project rule as the child finished: the rule says how
            # it ended (a collapsed model that completes its budget is still collapsed). An
            # Optuna prune at that moment is moot: the trial is complete.
            stopped = verdict
        result, problems = read_result_dict(run_dir)
        # No result and no SIGKILL (the OOM killer's): was there room to write one?
        unwritable = (
            run_dir_unwritable(run_dir)
            if result is None
            and stopped is None
            and rc not in (-signal.SIGKILL, 128 + signal.SIGKILL)
            else None
        )
        outcome, reason = classify(rc, result, stopped, run_dir, unwritable=unwritable)
        if result is not None and outcome != result.get("outcome"):
            with contextlib.suppress(OSError):  # the database has it; the run dir is a copy
                record_verdict(run_dir, outcome, reason)
        self.times.poll()
        return Attempt(
            outcome,
            reason,
            result,
            self.history,
            wall_s,
            self.times,
            self.peak,
            self.child.pid,
            rc,
            self.follower.problems + problems,
            unwritable=unwritable,
        )


# --- how a child ended ---------------------------------------------------------------------------


#: Bytes the parent writes to see whether a child without ``result.json`` had room for one: a
#: result with its traceback and final metrics is a few KiB; a few times that, to be sure.
PROBE_BYTES = 64 * 1024


def run_dir_unwritable(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot take a file of ``PROBE_BYTES`` now (a full disk or quota, a
    read-only or vanished dir), or None when it can. A child on a nearly full disk dies as it
    writes (exit 1, and its traceback lost with the log it could not write): without this, that
    looked like a bug in its configuration, and the trial was counted instead of re-queued."""
    probe = Path(run_dir) / f".sweeps-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            left = memoryview(b"\0" * PROBE_BYTES)
            while left:  # a nearly full disk takes part of a write, then refuses the rest
                left = left[os.write(fd, left) :]
            os.fsync(fd)  # where space is allocated late, the shortage shows here
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def classify(
    returncode: int | None,
    result: dict[str, Any] | None,
    stopped: Verdict | None,
    run_dir: Path | None = None,
    *,
    unwritable: str | None = None,
) -> tuple[str, str]:
    """A run's outcome and reason: the parent's own decision (prune, timeout, stop) first, then
    the child's ``result.json``, then its exit code (no result: a SIGKILL nobody here sent is
    the kernel's OOM killer)."""
    if stopped is not None:
        return stopped.outcome, stopped.reason
    if result is not None:
        outcome = str(result["outcome"])
        if outcome not in outcomes.ENDINGS:
            return outcomes.CRASHED, f"the child reported an unknown outcome {outcome!r}"
        return outcome, str(result.get("reason") or outcome)
    if returncode in (-signal.SIGTERM, -signal.SIGINT):
        # Sent from outside, before the child could write its result (a Slurm scancel or
        # preemption signals every process of the job): not the configuration's fault, so
        # interrupted, which is re-queued.
        return outcomes.INTERRUPTED, (
            f"stopped by signal {-returncode} from outside its "
            f"worker (scancel, a preemption, a shutdown) before it "
            f"wrote {RESULT_FILE}"
        )
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return outcomes.OOM, (
            f"killed by SIGKILL (exit {returncode}) without writing "
            f"{RESULT_FILE}: the kernel's out-of-memory killer"
        )
    if unwritable is not None:
        return outcomes.CRASHED, (
            f"environment: the child exited with code {returncode} "
            f"without {RESULT_FILE}, and its run dir {run_dir} cannot be "
            f"written ({unwritable})"
        )
    if returncode == outcomes.BAD_INPUT_EXIT_CODE:
        return (
            outcomes.CRASHED,
            "environment: the child rejected its input (exit 2; its "
            "config was checked here, so its corpus or token cache changed): "
            + _last_log_line(run_dir),
        )
    if returncode == outcomes.ENVIRONMENT_EXIT_CODE:
        return outcomes.CRASHED, "environment: " + _last_log_line(run_dir)
    known = outcomes.outcome_for_exit_code(returncode) if returncode is not None else None
    if known is not None and known != outcomes.COMPLETE:
        return known, (
            f"exit code {returncode} ({known}) without {RESULT_FILE}: " + _last_log_line(run_dir)
        )
    return outcomes.CRASHED, (
        f"exited with code {returncode} without writing {RESULT_FILE}: " + _last_log_line(run_dir)
    )


def environment_failed(attempt: Attempt) -> bool:
    """Whether the environment, not the configuration, ended the attempt: the child said so
    (``result.json`` or its exit code), or refused an input the parent had checked (its corpus
    or token cache changed under it). Such a trial is re-queued, not counted."""
    if attempt.result is not None:
        return bool(attempt.result.get("environment"))
    if attempt.unwritable is not None:
        return True
    return attempt.returncode in (outcomes.BAD_INPUT_EXIT_CODE, outcomes.ENVIRONMENT_EXIT_CODE)


def _last_log_line(run_dir: Path | None) -> str:
    """For a human reading the reason only (the outcome never depends on log text)."""
    if run_dir is None:
        return "see its log"
    try:
        lines = (run_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "see its log"
    lines = [line.strip() for line in lines if line.strip()]
    return lines[-1][:300] if lines else f"see {run_dir / LOG_FILE}"
