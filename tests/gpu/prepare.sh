#!/usr/bin/env bash
# Fetch the wheels the GPU host lacks into .whl/ (run where pip reaches PyPI, before the device
# run), or, with --check, prove the set there complete and consistent (no network).
#   tests/gpu/prepare.sh            download tests/gpu/wheels.txt into .whl/, then check
#   tests/gpu/prepare.sh --check    check only
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
if [ "${1:-}" != "--check" ]; then
    "$PY" tests/gpu/wheelset.py download .whl
fi
exec "$PY" tests/gpu/wheelset.py check .whl
