"""The outcome vocabulary, in one place: every way a trial ends (and the two states of a trial
that has not ended), in display order, with the Optuna state it is told as, the exit code of the
child process that ends so, whether it marks the configuration infeasible, and its chart colour.

``python -m lm.train RUN_DIR`` exits with the code of its outcome, after writing ``result.json``
(except for bad input, where nothing is written). The orchestrator reads ``result.json``; the
exit code is the fallback when that file is missing (a SIGKILL, e.g. the kernel's OOM killer:
exit -9/137). Outcomes without an exit code are decided by the orchestrator, never by the child.

Optuna states are named here as strings (``COMPLETE``, ``PRUNED``, ``FAIL``, ``RUNNING``,
``WAITING``): ``lm`` knows nothing of Optuna; ``sweeps`` turns a name into ``TrialState[name]``.
Every outcome is told as PRUNED (with a constraint value) rather than FAIL when it says something
about the configuration, so samplers learn from it; FAIL is kept for endings that say nothing
about it (a bug, a stop by the user).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """One outcome: its name, how it is told to Optuna, and how it is shown."""

    name: str
    state: str  # the Optuna state's name
    meaning: str
    exit_code: int | None = None  # the child's exit code when the child itself ends so
    infeasible: bool = False  # constraint value 1.0: the configuration cannot run (memory, data)
    color: str = "#17becf"


COMPLETE = "complete"
PRUNED = "pruned"
PREDICTED_OOM = "predicted_oom"
TOO_LITTLE_DATA = "too_little_data"
OOM = "oom"
UNIGRAM_COLLAPSE = "unigram_collapse"
STALLED = "stalled"
UNK_DOMINATED = "unk_dominated"
DIVERGED = "diverged"
TIMEOUT = "timeout"
CRASHED = "crashed"
INTERRUPTED = "interrupted"
RUNNING = "running"
WAITING = "waiting"

#: Every outcome, in the order tables, legends and counts list them.
VOCABULARY: tuple[Outcome, ...] = (
    Outcome(COMPLETE, "COMPLETE", "the token budget was trained and evaluated", 0, color="#2ca02c"),
    Outcome(
        PRUNED,
        "PRUNED",
        "stopped early by the pruner (median, successive halving, hyperband)",
        color="#7f7f7f",
    ),
    Outcome(
        PREDICTED_OOM,
        "PRUNED",
        "never launched: its predicted peak exceeds the budget",
        infeasible=True,
        color="#ff9896",
    ),
    # The configuration's fault, not the environment's: re-queueing it would replay the same
    # impossible point on every resume, so it is counted and told to the sampler as infeasible.
    Outcome(
        TOO_LITTLE_DATA,
        "PRUNED",
        "never trained: a split of the corpus holds fewer tokens "
        "than seq_len + 1 with this tokenizer, so no window fits",
        8,
        infeasible=True,
        color="#ffbb78",
    ),
    Outcome(
        OOM,
        "PRUNED",
        "CUDA out of memory, MemoryError, a failed CPU allocation or the kernel's OOM killer",
        3,
        infeasible=True,
        color="#d62728",
    ),
    Outcome(
        UNIGRAM_COLLAPSE,
        "PRUNED",
        "after enough optimizer steps, predicts the corpus "
        "unigram whatever the context, worse than the unigram",
        color="#9467bd",
    ),
    Outcome(
        STALLED,
        "PRUNED",
        "after enough optimizer steps, predictions that ignore the context "
        "and are far from the unigram (near uniform, or stuck elsewhere): not learning",
        color="#c5b0d5",
    ),
    Outcome(
        UNK_DOMINATED,
        "PRUNED",
        "after enough optimizer steps, <unk> is the likeliest "
        "prediction at most positions and most of what the model writes",
        color="#17becf",
    ),
    Outcome(
        DIVERGED, "PRUNED", "a NaN or infinite loss, or a loss running away", 4, color="#8c564b"
    ),
    Outcome(TIMEOUT, "PRUNED", "max_wall_s ran out before max_tokens", 5, color="#bcbd22"),
    Outcome(
        CRASHED,
        "FAIL",
        "an unexpected exception (a bug); the traceback is in result.json",
        1,
        color="#222222",
    ),
    Outcome(
        INTERRUPTED,
        "FAIL",
        "SIGTERM/SIGINT: the parent pruned or stopped the trial",
        6,
        color="#e377c2",
    ),
    Outcome(RUNNING, "RUNNING", "not finished yet", color="#1f77b4"),
    Outcome(WAITING, "WAITING", "queued, not started", color="#aec7e8"),
)
BY_NAME: dict[str, Outcome] = {o.name: o for o in VOCABULARY}

#: Every outcome a finished trial can have, in display order.
ENDINGS: tuple[str, ...] = tuple(
    o.name for o in VOCABULARY if o.state not in ("RUNNING", "WAITING")
)
#: Every name, endings then the states of trials not finished: the display order.
ORDER: tuple[str, ...] = tuple(o.name for o in VOCABULARY)
PRUNED_OUTCOMES = frozenset(o.name for o in VOCABULARY if o.state == "PRUNED")
FAILED_OUTCOMES = frozenset(o.name for o in VOCABULARY if o.state == "FAIL")
#: Outcomes that mark the configuration infeasible (constraint value 1.0): out of memory, or
#: too little data for it.
OOM_OUTCOMES = frozenset(o.name for o in VOCABULARY if o.infeasible)
COLORS: dict[str, str] = {o.name: o.color for o in VOCABULARY}
#: Colour of an outcome this vocabulary does not know.
UNKNOWN_COLOR = "#dbdb8d"
#: The project's verdicts on a trained model's predictions (``sweeps.verdicts``): the collapse chart
#: shows each such trial's mean prediction against the corpus frequencies.
PREDICTION_VERDICTS = (UNIGRAM_COLLAPSE, STALLED, UNK_DOMINATED)

#: Exit code of a bad-input error (``SweepsError.exit_code``): nothing was written.
BAD_INPUT_EXIT_CODE = 2
#: Exit code of a run the environment failed (a full disk, a read-only or vanished run dir or
#: corpus): it says nothing about its configuration, so the orchestrator re-queues it instead of
#: counting it. ``result.json`` (when it could be written) has ``environment: true``.
ENVIRONMENT_EXIT_CODE = 7

EXIT_CODES: dict[str, int] = {o.name: o.exit_code for o in VOCABULARY if o.exit_code is not None}
_BY_CODE = {code: outcome for outcome, code in EXIT_CODES.items()}
#: The outcome shown for a trial with no recorded outcome, by its Optuna state's name (a FAIL
#: without one was failed by a heartbeat: its worker died).
_BY_STATE = {
    "COMPLETE": COMPLETE,
    "PRUNED": PRUNED,
    "FAIL": CRASHED,
    "RUNNING": RUNNING,
    "WAITING": WAITING,
}


def outcome_for_exit_code(code: int) -> str | None:
    """The outcome a child's exit code stands for; None for bad input or an unknown code."""
    return _BY_CODE.get(code)


def state_name(outcome: str) -> str:
    """The Optuna state an ending is told as: ``COMPLETE``, ``PRUNED`` or ``FAIL``."""
    if outcome not in ENDINGS:
        raise ValueError(f"unknown outcome {outcome!r}")
    return BY_NAME[outcome].state


def outcome_for_state(state_name: str) -> str:
    """The outcome shown for a trial that recorded none, from its Optuna state's name."""
    return _BY_STATE.get(state_name, state_name.lower())


def shown(recorded: str | None, state_name: str) -> str:
    """The outcome shown for a trial: ``running``/``waiting`` while it is (a re-run after a
    failure may carry a stale attribute), else its recorded outcome, else its state's."""
    if state_name in ("RUNNING", "WAITING"):
        return _BY_STATE[state_name]
    return recorded or outcome_for_state(state_name)


def constraint_value(outcome: str) -> float:
    """Optuna constraint value (> 0 infeasible): 1.0 for an infeasible ending."""
    return 1.0 if outcome in OOM_OUTCOMES else 0.0


def color(outcome: str) -> str:
    """The outcome's colour in every chart."""
    return COLORS.get(outcome, UNKNOWN_COLOR)


def display_order(present: Iterable[Any]) -> list[str]:
    """The outcomes in ``present``, in display order (unknown ones last, sorted)."""
    names = {str(o) for o in present}
    known = [o for o in ORDER if o in names]
    return known + sorted(names - set(known))
