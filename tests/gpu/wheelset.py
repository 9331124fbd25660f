"""The wheels the GPU host lacks: download them (``download DIR``) and check a set (``check DIR``).

The GPU host has no network; what the project needs beyond its image travels as wheels in the
ignored ``.whl/`` folder and is installed there with ``pip install --no-index --no-deps``. With
``--no-deps`` nothing checks that the set is whole, so ``check`` does, on any machine, offline:

- every wheel installs on the host: CPython 3.12, Linux x86-64 (``py3-none-any``, ``cp312`` or
  ``abi3`` on a ``manylinux``/``linux`` x86-64 platform);
- one version of each distribution (two stop the whole install);
- every pinned name of ``wheels.txt`` is there, at its pinned version;
- every ``Requires-Dist`` of every wheel whose marker holds on the host (extras excluded) names a
  wheel of the set or a package of ``host-packages.txt``; the versions of host packages are not
  known here, so only their names are checked;
- the set is under ``MAX_BYTES`` (the working tree travels with a 64 MiB limit).

    python3 tests/gpu/wheelset.py download .whl
    python3 tests/gpu/wheelset.py check .whl
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
except ImportError:  # a bare interpreter: pip carries its own copy
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

HERE = Path(__file__).resolve().parent
PINS = HERE / "wheels.txt"
HOST_PACKAGES = HERE / "host-packages.txt"
#: What the wheels may weigh together: the tree, wheels included, travels with 64 MiB at most.
MAX_BYTES = 40 * 2**20
#: The GPU host's interpreter and platform, as environment markers see them.
HOST_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "implementation_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "platform_release": "",
    "platform_version": "",
    "extra": "",
}
#: ``pip download`` flags for those wheels (pip matches each manylinux tag exactly).
PLATFORM_FLAGS = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *[
        a
        for p in (
            "manylinux_2_28_x86_64",
            "manylinux_2_27_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
            "manylinux1_x86_64",
        )
        for a in ("--platform", p)
    ],
]


def normalize(name: str) -> str:
    """PEP 503: ``Mako``, ``typing_extensions`` and ``typing-extensions`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_names(path: Path) -> list[str]:
    """The lines of ``path`` without comments and blanks."""
    text = path.read_text(encoding="utf-8")
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def pins(path: Path = PINS) -> dict[str, str]:
    """``wheels.txt`` as {normalized name: version}."""
    out = {}
    for line in read_names(path):
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise ValueError(f"{path.name}: {line!r} is not NAME==VERSION")
        out[normalize(name.strip())] = version.strip()
    return out


def host_packages(path: Path = HOST_PACKAGES) -> set[str]:
    return {normalize(name) for name in read_names(path)}


def _tag_fits(filename: str) -> bool:
    """Whether a wheel's file name tags install on CPython 3.12, Linux x86-64."""
    parts = filename[: -len(".whl")].split("-")
    python, abi, platform = parts[-3], parts[-2], parts[-1]
    pythons, abis, platforms = python.split("."), abi.split("."), platform.split(".")
    if "any" in platforms:
        return any(p in ("py3", "cp312") for p in pythons)
    on_host = any(
        p.endswith("_x86_64") and ("manylinux" in p or p.startswith("linux")) for p in platforms
    )
    cpython3 = [int(p[3:]) for p in pythons if re.fullmatch(r"cp3\d+", p)]
    return on_host and (
        ("cp312" in pythons and "cp312" in abis)
        or ("abi3" in abis and any(minor <= 12 for minor in cpython3))
    )


def metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """(name, version, Requires-Dist lines) from a wheel's ``*.dist-info/METADATA``."""
    with zipfile.ZipFile(wheel) as zf:
        names = [
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        if len(names) != 1:
            raise ValueError(f"{wheel.name} has {len(names)} .dist-info/METADATA files, not 1")
        headers = HeaderParser().parsestr(zf.read(names[0]).decode("utf-8"))
    return headers["Name"], headers["Version"], headers.get_all("Requires-Dist") or []


def check(
    folder: Path,
    pinned: dict[str, str] | None = None,
    host: set[str] | None = None,
    max_bytes: int = MAX_BYTES,
) -> list[str]:
    """Every problem of the wheel set in ``folder``, one line each; empty when it is whole."""
    pinned = pins() if pinned is None else pinned
    host = host_packages() if host is None else host
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        return [f"no wheels in {folder}; run tests/gpu/prepare.sh where pip reaches PyPI"]
    problems: list[str] = []
    found: dict[str, list[str]] = {}
    requires: list[tuple[str, str]] = []
    for wheel in wheels:
        if not _tag_fits(wheel.name):
            problems.append(f"{wheel.name} does not install on CPython 3.12, Linux x86-64")
        try:
            name, version, reqs = metadata(wheel)
        except (zipfile.BadZipFile, ValueError, KeyError) as exc:
            problems.append(f"{wheel.name} is not a readable wheel: {exc}")
            continue
        found.setdefault(normalize(name), []).append(version)
        requires += [(name, r) for r in reqs]
    for name, versions in sorted(found.items()):
        if len(versions) > 1:
            problems.append(
                f"{name} is there in {len(versions)} versions "
                f"({', '.join(sorted(versions))}); keep one"
            )
    for name, version in sorted(pinned.items()):
        if name not in found:
            problems.append(f"{name}=={version} is pinned in wheels.txt but has no wheel")
        elif version not in found[name]:
            problems.append(f"{name} is {', '.join(found[name])}, wheels.txt pins {version}")
    for owner, line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(f"{owner}: unreadable Requires-Dist {line!r} ({exc})")
            continue
        if req.marker is not None and not req.marker.evaluate(HOST_MARKERS):
            continue  # an extra, another Python or another platform
        dep = normalize(req.name)
        if dep in found:
            bad = [v for v in found[dep] if not req.specifier.contains(v, prereleases=True)]
            if bad:
                problems.append(f"{owner} needs {line!r}, the set has {dep} {', '.join(bad)}")
        elif dep not in host:
            problems.append(
                f"{owner} needs {req.name}, neither in the set nor on the host "
                f"(tests/gpu/host-packages.txt); add it to wheels.txt"
            )
    size = sum(w.stat().st_size for w in wheels)
    if size > max_bytes:
        problems.append(
            f"the wheels weigh {size / 2**20:.1f} MiB, over {max_bytes / 2**20:.0f} MiB"
        )
    return problems


def download(folder: Path) -> None:
    """``pip download`` each pin, no dependencies (the check names any that is missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = pins()
    for wheel in folder.glob("*.whl"):  # other versions of a pinned name: only one may stay
        try:
            name, version, _ = metadata(wheel)
        except (zipfile.BadZipFile, ValueError, KeyError):
            continue
        if normalize(name) in wanted and wanted[normalize(name)] != version:
            wheel.unlink()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            *PLATFORM_FLAGS,
            "-d",
            str(folder),
            *[f"{n}=={v}" for n, v in wanted.items()],
        ],
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("download", "check"))
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    if args.action == "download":
        download(args.folder)
        return 0
    problems = check(args.folder)
    wheels = sorted(args.folder.glob("*.whl"))
    for problem in problems:
        print(f"wheel set: {problem}")
    if not problems:
        size = sum(w.stat().st_size for w in wheels)
        print(
            f"wheel set complete: {len(wheels)} wheels, {size / 2**20:.1f} MiB, one version "
            f"each, every requirement in the set or on the host"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
