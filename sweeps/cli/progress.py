"""What ``sweeps run`` shows while a study runs: trials by outcome, the best value, the running
trials; a live table on a terminal, else a progress line now and then and one per finished trial.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from lm import outcomes
from lm.errors import SweepsError
from sweeps import study as study_service
from sweeps.console import err_console, escape_controls, plain, print_summary, write_line

if TYPE_CHECKING:
    import optuna

    from sweeps.engines import Engine, Job


class Board:
    """What `sweeps run` shows: trials by outcome, the best value, the running trials."""

    def __init__(self, study: optuna.Study, n_trials: int) -> None:
        import threading

        self.study = study
        self.n_trials = n_trials
        self.lock = threading.Lock()
        self.running: dict[int, dict[str, Any]] = {}
        self.messages: deque[str] = deque()
        self.counts: Counter[str] = Counter()
        self.best: str = "-"
        self.finished = 0
        self.refreshed = 0.0
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        with self.lock:
            self.messages.append(text)

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        with self.lock:
            number: Any = data.get("number")  # a trial's number (a note has none)
            if kind == "start":
                self.running[number] = {
                    "params": data.get("params", {}),
                    "tokens": 0,
                    "max_tokens": data.get("max_tokens"),
                    "worker": data.get("worker", ""),
                    "since": time.monotonic(),
                }
            elif kind == "launch" and number in self.running:
                self.running[number]["tokens"] = 0  # a fitted retry trains from token 0 again
            elif kind in ("eval", "progress") and number in self.running:
                # Both report tokens trained; whichever came last may be the older count.
                r = self.running[number]
                r["tokens"] = max(r["tokens"], data.get("tokens") or 0)
                if kind == "eval":
                    r["val_bpb"] = data.get("val_bpb")
            elif kind == "note":  # about the whole run (sweeps.admission.gpu_sharing_note)
                self.messages.append(str(data.get("text", "")))
                self.refreshed = 0.0
            elif kind == "end":
                info = self.running.pop(number, {})
                took = time.monotonic() - info.get("since", time.monotonic())
                values = data.get("values")
                shown = (" " + ", ".join(f"{v:.4g}" for v in values)) if values else ""
                self.messages.append(
                    f"trial {number} {data.get('outcome')}{shown} "
                    f"({took:.1f} s): {data.get('reason')}"
                )
                self.refreshed = 0.0

    def refresh(self, force: bool = False) -> None:
        from sweeps.workers import budget_state

        if not force and time.monotonic() - self.refreshed < 2.0:
            return
        self.refreshed = time.monotonic()
        trials = self.study.get_trials(deepcopy=False)
        self.counts = study_service.outcome_counts(trials, finished_only=True)
        self.finished = budget_state(trials, self.n_trials).finished
        self.best = study_service.best_text(self.study, trials)

    def line(self) -> str:
        counts = ", ".join(f"{o} {self.counts[o]}" for o in outcomes.ORDER if self.counts[o])
        with self.lock:
            running = ", ".join(f"#{n} {_tokens(r)}" for n, r in sorted(self.running.items()))
        return (
            f"[{time.monotonic() - self.started:6.0f} s] {self.finished}/{self.n_trials} "
            f"finished ({counts or 'none yet'}); best {self.best}; "
            f"running: {running or 'none'}"
        )

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(
            box=None,
            padding=(0, 2),
            title_justify="left",
            title=f"{self.finished}/{self.n_trials} finished, best {self.best}",
        )
        for col in ("trial", "worker", "tokens", "val_bpb", "params"):
            table.add_column(col)
        with self.lock:
            for number, r in sorted(self.running.items()):
                bpb = r.get("val_bpb")
                table.add_row(
                    str(number),
                    plain(r["worker"]),
                    _tokens(r),
                    "-" if bpb is None else f"{bpb:.4f}",
                    plain(" ".join(f"{k}={v}" for k, v in r["params"].items())),
                )
        counts = "  ".join(f"{o} {self.counts[o]}" for o in outcomes.ORDER if self.counts[o])
        return Group(counts or "no trial finished yet", table)

    def drain(self) -> list[str]:
        with self.lock:
            out = list(self.messages)
            self.messages.clear()
        return out


def _tokens(r: dict[str, Any]) -> str:
    done, total = r.get("tokens") or 0, r.get("max_tokens")
    return f"{done:,}/{total:,} tokens" if total else f"{done:,} tokens"


@contextmanager
def live_display(board: Board, *, every_s: float = 10.0) -> Iterator[Callable[[], None]]:
    """A ``tick`` for ``run_workers``: rich Live on a terminal, else a line every ``every_s``
    seconds and one per finished trial (stderr)."""
    if err_console.is_terminal:
        from rich.live import Live

        with Live(
            board.render(), console=err_console, refresh_per_second=2, transient=True
        ) as live:

            def tick() -> None:
                board.refresh()
                for message in board.drain():
                    live.console.print(escape_controls(message), highlight=False, markup=False)
                live.update(board.render())

            yield tick
        return
    last = [time.monotonic()]
    dirty = [False]  # a trial ended since the last progress line

    def tick() -> None:  # type: ignore[no-redef]  # the plain tick, where the live one is not
        messages = board.drain()
        for message in messages:
            write_line(message)
        dirty[0] = dirty[0] or bool(messages)
        if messages or time.monotonic() - last[0] > every_s:
            board.refresh(force=bool(messages))
            write_line(board.line())
            sys.stderr.flush()
            last[0] = time.monotonic()
            dirty[0] = False

    yield tick
    messages = board.drain()
    for message in messages:
        write_line(message)
    if messages or dirty[0]:
        board.refresh(force=True)
        write_line(board.line())


def drive(engine: Engine, job: Job) -> None:
    """Run ``job`` on ``engine`` with the board live (Ctrl-C stops it: once, cleanly; twice,
    at once), then the summary, whatever the engine."""
    from sweeps import workers as wk
    from sweeps.engines import Hooks

    board = Board(job.study, wk.target_trials(job.spec, job.study, job.n_trials))
    flags = wk.StopFlags()
    with wk.stop_on_signals(flags, say=board.say), live_display(board) as tick:
        results = engine.run(job, Hooks(flags, board.on_event, board.say, tick))
    summary(board, job.study_dir, results, flags)


def summary(board: Board, study_dir: Path, results: list[Any], flags: Any) -> None:
    """The end of ``sweeps run`` (local or on Slurm): where the study stands, then one line for
    a worker's error (exit 2) or a stop (exit 130)."""
    board.refresh(force=True)
    print_summary(
        f"study {board.study.study_name}",
        [
            ("finished", f"{board.finished}/{board.n_trials}"),
            ("outcomes", counts_text(study_service.ordered_counts(board.counts)) or "none"),
            ("best", board.best),
            ("runs", str(study_dir)),
        ],
    )
    failed = [r for r in results if r.error]
    if failed:
        # One line; `sweeps --debug` shows the exception behind it, SQL and all.
        raise SweepsError(f"a worker stopped on an error: {failed[0].error}") from getattr(
            failed[0], "exception", None
        )
    if flags.stop.is_set():
        err_console.print("stopped; `sweeps run` again resumes the study", highlight=False)
        raise typer.Exit(130)


def counts_text(counts: dict[str, int], sep: str = ", ") -> str:
    return sep.join(f"{o} {n}" for o, n in counts.items())
