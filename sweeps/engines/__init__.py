"""Where and when trials run. Optuna's storage stays the single source of truth for asking,
telling, heartbeats and retries; an engine only places trials.

- ``local`` (the default, nothing to install): one machine; each device (each GPU, the CPU's
  memory and cores) is a pool, and a trial is admitted to a device when its calibrated predicted
  peak plus a margin fits what the running trials' predictions leave free.
- ``ray`` (``pip install -e .[ray]``): every trial is a Ray task whose resource request comes from
  the same prediction, so Ray places and packs trials across the nodes of a cluster.
- ``slurm``: a job array of ``sweeps worker`` tasks whose ``--mem``, ``--cpus-per-task`` and
  GPUs come from the same prediction (the largest point that fits).
"""

ENGINES = ("local", "ray", "slurm")
#: Keys of a spec's ``[engine]`` table: ``name`` picks the engine when ``--engine`` is not given,
#: the others are the Slurm engine's options (the flags of the same names).
ENGINE_KEYS = ("name", "partition", "time", "jobs", "gpus_per_job", "account", "qos", "sbatch_args")
