"""Which Slurm job ran a trial, from the environment Slurm gives its tasks: read by the runner
(beside ``sweeps.admission``, below the engines: nothing below ``sweeps.engines`` imports it).
"""

from __future__ import annotations

import os


def trial_attrs() -> dict[str, str]:
    """The user attributes that say which Slurm job ran a trial (none outside Slurm)."""
    env = os.environ
    if not env.get("SLURM_JOB_ID"):
        return {}
    if env.get("SLURM_ARRAY_JOB_ID"):
        return {"slurm_job": f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID')}"}
    return {"slurm_job": env["SLURM_JOB_ID"]}
