"""A process of claimers for the claim-race test: ``python -m tests.sweeps.claimer URL STUDY
N_TRIALS THREADS`` claims trials of STUDY with THREADS threads, through the workers' own
``claim_trial``, and completes each at once (no training), until the budget is done.

``... hold URL STUDY``: take the study's claim lock, print ``held`` and sleep (to be killed)."""

from __future__ import annotations

import sys
import threading
import time

import optuna

from sweeps import workers as wk
from sweeps.claims import claim_lock
from sweeps.storage import open_storage


def claim_until_done(study: optuna.Study, storage: optuna.storages.RDBStorage, n: int) -> None:
    while True:
        done, trial = wk.claim_trial(study, storage, n)
        if done:
            return
        if trial is None:  # the budget is full of running trials: wait for one to end
            time.sleep(0.01)
            continue
        study.tell(trial, trial.suggest_float("x", 0.0, 1.0))


def main(argv: list[str]) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if argv[0] == "hold":
        storage = open_storage(argv[1])
        with claim_lock(storage, argv[2]):
            print("held", flush=True)
            time.sleep(3600)
        return
    url, name, n, n_threads = argv[0], argv[1], int(argv[2]), int(argv[3])
    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    threads = [
        threading.Thread(target=claim_until_done, args=(study, storage, n))
        for _ in range(n_threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(sys.argv[1:])
