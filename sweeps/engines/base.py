"""What every engine implements (``Engine``) and what a run hands it (``Job``, ``Hooks``).

An engine only places trials: Optuna's storage stays the single source of truth for asking,
telling, heartbeats and retries, and the run pipeline (``sweeps.pipeline``) does what every run
needs whatever the engine (its options, the runs dir, the corpus, the study). Each engine says
what it needs checked before a study is created (this host's devices, a cluster's nodes), where
its trials would go (the dry run's rows) and runs the study's trials.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sweeps.monitor import StopFlags

if TYPE_CHECKING:
    import optuna

    from sweeps.plan import Placement
    from sweeps.spec import StudySpec


@dataclass(frozen=True)
class EngineOptions:
    """The engine options of a command line: Ray's ``--address``, the Slurm flags given
    (``sweeps.cli.slurm.cli_values``: None where not given), the replay's ``--table``."""

    address: str | None = None
    slurm: Mapping[str, Any] = field(default_factory=dict)
    table: Path | None = None


@dataclass
class Job:
    """A study opened for a run, with the options every engine takes."""

    spec: StudySpec
    storage: Any  # Optuna's RDBStorage
    study: optuna.Study
    url: str
    runs_dir: Path
    cap: int | None = None  # --max-concurrent: None, what the devices hold
    n_trials: int | None = None  # --n-trials: None, the study's
    launcher: str = "auto"
    beats: tuple[int, int] = (0, 0)  # --heartbeat, --grace

    @property
    def study_dir(self) -> Path:
        return self.runs_dir / self.spec.name


@dataclass
class Hooks:
    """What a run reports to, and is stopped by: the board's events and lines (``say``), the
    ``tick`` called every half second from the main thread, the stop flags (Ctrl-C)."""

    flags: StopFlags = field(default_factory=StopFlags)
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    say: Callable[[str], None] = lambda text: None
    tick: Callable[[], None] | None = None


class Engine(Protocol):
    """Where and when a study's trials run (its name is its key in ``sweeps.engines.ENGINES``;
    no engine carries one)."""

    def check(self, spec: StudySpec, cap: int | None) -> None:
        """What the trials need of the host or cluster, checked before a study is created (a
        one-line ``SweepsError`` otherwise)."""
        ...

    def describe(self, spec: StudySpec, cap: int | None, n_trials: int) -> Placement:
        """Where the trials would go, for the dry run (nothing is started)."""
        ...

    def run(self, job: Job, hooks: Hooks) -> list[Any]:
        """Run the study's trials until it is done, its time is up or ``hooks.flags.stop`` is
        set; the workers' results (``sweeps.workers.WorkerResult``: their error lines)."""
        ...
