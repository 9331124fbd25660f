"""``[engine]``: which engine runs a study's trials and the Slurm engine's options. The names
are the spec's (and the CLI's ``--engine``): ``sweeps.engines.ENGINES`` implements one engine per
name, and the Slurm engine checks its options' values (``sweeps.engines.slurm.options_from``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The engines a spec or ``--engine`` may name, the default first.
ENGINE_NAMES = ("local", "ray", "slurm", "replay")
DEFAULT_ENGINE = ENGINE_NAMES[0]
#: Keys of a spec's ``[engine]`` table: ``name`` picks the engine when ``--engine`` is not given,
#: the others are the Slurm engine's options (the flags of the same names).
ENGINE_KEYS = ("name", "partition", "time", "jobs", "gpus_per_job", "account", "qos", "sbatch_args")


def engine_name(given: str | None, table: Mapping[str, Any] | None) -> str:
    """``--engine``, else the spec's ``[engine] name``, else ``local``."""
    return given or str((table or {}).get("name", DEFAULT_ENGINE))
