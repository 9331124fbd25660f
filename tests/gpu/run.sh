#!/usr/bin/env bash
# The GPU acceptance kit in one command (studies/gpu/README.md): at most 8 minutes on a CUDA
# host, every step under its own budget; the log and summary.json go to OUTDIR (default $OUT,
# else gpu-out/). Without CUDA every GPU step is skipped with the reason.
#   tests/gpu/run.sh [OUTDIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${1:-${OUT:-gpu-out}}
exec "${PYTHON:-python3}" tests/gpu/kit.py run --out "$OUTDIR"
