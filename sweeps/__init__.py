"""sweeps: Optuna studies over small GPT training runs, every trial its own process."""

from lm.errors import SweepsError

__all__ = ["SweepsError"]
