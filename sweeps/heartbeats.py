"""The default heartbeat of a running trial: how often its worker records that it is alive, and
how long a trial may stay silent before another worker fails and re-queues it
(``sweeps.storage.open_storage``'s ``heartbeat_interval`` and ``grace_period``).

A module of its own, with no imports: the CLI's option defaults, the workers and the engines
all read the same two numbers, and none of them should pull in the storage or the runner to do so.
"""

#: Seconds between a running trial's heartbeats (``--heartbeat``).
HEARTBEAT_INTERVAL_S = 10
#: Seconds without a heartbeat after which a trial is failed and re-queued (``--grace``): long
#: enough for several missed beats, so one slow database write never fails a live trial.
GRACE_PERIOD_S = 60
