"""How a training run ends: its outcome and the child process's exit code, in one place.

``python -m lm.train RUN_DIR`` exits with the code of its outcome, after writing ``result.json``
(except for bad input, where nothing is written). The orchestrator reads ``result.json``; the
exit code is the fallback when that file is missing (a SIGKILL, e.g. the kernel's OOM killer:
exit -9/137).

=============  ====  ==========================================================================
outcome        code  meaning
=============  ====  ==========================================================================
complete       0     the token budget was trained and evaluated
crashed        1     an unexpected exception (a bug); the traceback is in result.json
(bad input)    2     a ``SweepsError`` before training (config, corpus, device): nothing written
oom            3     CUDA out of memory, ``MemoryError``, or a failed CPU allocation
diverged       4     a NaN or infinite training loss
timeout        5     ``max_wall_s`` ran out before ``max_tokens``
interrupted    6     SIGTERM/SIGINT (the parent pruned or stopped the trial)
=============  ====  ==========================================================================
"""

from __future__ import annotations

COMPLETE = "complete"
CRASHED = "crashed"
OOM = "oom"
DIVERGED = "diverged"
TIMEOUT = "timeout"
INTERRUPTED = "interrupted"

#: Exit code of a bad-input error (``SweepsError.exit_code``): nothing was written.
BAD_INPUT_EXIT_CODE = 2

EXIT_CODES: dict[str, int] = {
    COMPLETE: 0,
    CRASHED: 1,
    OOM: 3,
    DIVERGED: 4,
    TIMEOUT: 5,
    INTERRUPTED: 6,
}

_BY_CODE = {code: outcome for outcome, code in EXIT_CODES.items()}


def outcome_for_exit_code(code: int) -> str | None:
    """The outcome a child's exit code stands for; None for bad input or an unknown code."""
    return _BY_CODE.get(code)
