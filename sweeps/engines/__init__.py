"""Where and when trials run, each engine behind one protocol (``sweeps.engines.base.Engine``:
check, describe for the dry run, run). Optuna's storage stays the single source of truth for
asking, telling, heartbeats and retries; an engine only places trials. The memory pools they
share are ``sweeps.admission``; the run pipeline that calls them is ``sweeps.pipeline``.

- ``local`` (the default, nothing to install): one machine; each device (each GPU, the CPU's
  memory and cores) is a pool, and a trial is admitted to a device when its calibrated predicted
  peak plus a margin fits what the running trials' predictions leave free.
- ``ray`` (``pip install -e .[ray]``): every trial is a Ray task whose resource request comes from
  the same prediction, so Ray places and packs trials across the nodes of a cluster.
- ``slurm``: a job array of ``sweeps worker`` tasks whose ``--mem``, ``--cpus-per-task`` and
  GPUs come from the same prediction (the largest point that fits).
- ``replay`` (``--table FILE``): no trial trains; each is read from a table of recorded trials
  (``sweeps.table``) and judged as a real run judges it, on a simulated clock.

Adding an engine: a module here with a class that implements ``Engine`` and ``from_options``,
its name in ``sweeps.spec.engine.ENGINE_NAMES`` and its class in ``ENGINES``.
"""

from __future__ import annotations

from lm.errors import SweepsError
from sweeps.engines.base import Engine, EngineOptions, Hooks, Job
from sweeps.engines.local import LocalEngine
from sweeps.engines.ray import RayEngine
from sweeps.engines.replay import ReplayEngine
from sweeps.engines.slurm import SlurmEngine
from sweeps.spec.engine import ENGINE_NAMES

#: The engines by name, in the spec's order (``sweeps.spec.engine.ENGINE_NAMES``).
ENGINES: dict[str, type[LocalEngine] | type[RayEngine] | type[SlurmEngine] | type[ReplayEngine]] = (
    dict(zip(ENGINE_NAMES, (LocalEngine, RayEngine, SlurmEngine, ReplayEngine), strict=True))
)

__all__ = ["ENGINES", "Engine", "EngineOptions", "Hooks", "Job", "make"]


def make(name: str, options: EngineOptions | None = None) -> Engine:
    """The engine ``name`` with the command line's engine options; an option of another engine
    (``--address`` without Ray, a Slurm flag without Slurm) is one line."""
    options = options or EngineOptions()
    if name not in ENGINES:
        raise SweepsError(f"--engine must be one of {', '.join(ENGINES)}, got {name!r}")
    if options.table is not None and name != "replay":
        raise SweepsError("--table is the replay engine's table; add --engine replay")
    if options.address is not None and name != "ray":
        raise SweepsError("--address is the Ray cluster's address; add --engine ray")
    given = [k for k, v in options.slurm.items() if v not in (None, ())]
    if name != "slurm" and given:
        flag = "--" + given[0].replace("_", "-").replace("sbatch-args", "sbatch-arg")
        raise SweepsError(f"{flag} is an option of the Slurm engine; add --engine slurm")
    return ENGINES[name].from_options(options)
