"""Where a study's trials may run: the spec's ``device`` against the GPUs a place has.

One rule, with one set of errors, for every engine and for the dry run:

- ``cpu``: the CPU (its children see no GPU);
- ``cuda:N``: that GPU alone; its children see every GPU, and the config names the one;
- ``cuda``: every GPU, each trial's children seeing only theirs (``CUDA_VISIBLE_DEVICES``); an
  error where there is none;
- ``auto``: as ``cuda`` where there are GPUs, else the CPU.

The local engine sizes a pool per device (``sweeps.admission.host_pool``: ``sweeps run``,
``sweeps worker``, a Slurm task and ``sweeps run --dry-run`` alike); the Ray and Slurm engines
take the kind for their clusters' nodes (the GPUs of their largest node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lm import host
from lm.errors import SweepsError


@dataclass(frozen=True)
class WorkerDevice:
    """Where one worker's children run: ``cpu`` or ``cuda``, their extra environment
    (``CUDA_VISIBLE_DEVICES``, ``SWEEPS_NUM_THREADS``) and CPU affinity."""

    kind: str = "cpu"  # "cpu" or "cuda"; which GPU is in ``env``
    env: dict[str, str] = field(default_factory=dict)
    cpus: list[int] | None = None
    label: str = "cpu"


@dataclass(frozen=True)
class Place:
    """Where the GPUs were counted, as an error names it: ``one`` has N GPUs, none is visible on
    ``any``, as ``source`` reports them."""

    one: str
    any: str
    source: str


HOST = Place("this host", "this host", f"nvidia-smi / {host.VISIBLE_DEVICES_ENV}")


def cluster(name: str, source: str) -> Place:
    """A cluster's nodes (``name``: "the Ray cluster", "partition 'gpu'"), counted by ``source``."""
    return Place(f"the largest node of {name}", f"any node of {name}", source)


@dataclass(frozen=True)
class Device:
    """One device trials may be placed on: ``env`` is what its trials' children get, ``index``
    its position among the place's GPUs (None: the CPU)."""

    kind: str  # cpu | cuda
    label: str
    env: dict[str, str] = field(default_factory=dict)
    index: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "cuda"):
            raise ValueError(f"kind must be cpu or cuda, got kind={self.kind!r}")
        if (self.index is None) != (self.kind == "cpu"):
            raise ValueError(
                f"a {self.kind} device takes {'no' if self.kind == 'cpu' else 'a'} "
                f"GPU index, got index={self.index!r}"
            )


CPU = Device("cpu", "cpu", {host.VISIBLE_DEVICES_ENV: ""})


def wanted(spec: Any) -> str:
    """The spec's ``device`` setting (``auto`` when it has none)."""
    return str(spec.base_values().get("device", "auto"))


def resolve(device: str, gpus: Sequence[str] | None = None, place: Place = HOST) -> list[Device]:
    """The devices trials of a spec asking for ``device`` go to, given the ``gpus`` of ``place``
    (default: this host's visible GPUs, read only when the spec may use one). ``SweepsError``
    when the spec asks for a GPU the place lacks."""
    if device == "cpu":
        return [CPU]
    gpus = host.visible_gpus() if gpus is None else list(gpus)
    if device.startswith("cuda:"):
        # A pinned device: the user chose it; its trials' children see it as the config names it.
        index = host.cuda_index(device)
        if index >= len(gpus):
            raise SweepsError(
                f"the spec asks for device {device}, but {place.one} has "
                f"{len(gpus)} visible GPU(s) ({place.source}); use device auto, "
                "cuda or cpu"
            )
        return [Device("cuda", f"gpu {gpus[index]}", {}, index)]
    if gpus:
        return [
            Device("cuda", f"gpu {g}", {host.VISIBLE_DEVICES_ENV: g}, i) for i, g in enumerate(gpus)
        ]
    if device == "cuda":
        raise SweepsError(
            f"the spec asks for device cuda, but no GPU is visible on {place.any} "
            f"({place.source}); use device auto or cpu"
        )
    return [CPU]


def gpu_ids(count: float) -> list[str]:
    """The GPU ids of a node that declares ``count`` GPUs (Ray and Slurm give a number)."""
    return [str(i) for i in range(int(count))]
