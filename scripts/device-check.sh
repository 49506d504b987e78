#!/usr/bin/env bash
# One measured run of the suite on a lent GPU, as the device tool runs it: from a checkout, with the
# machine's own packages (CuPy, NumPy, pytest, matplotlib, NVML), nothing installed.
#
#   scripts/device-check.sh [OUT]        default OUT: $OUT (the device tool's), else /tmp/gpuprobe-out
#
# Writes OUT/<gpu-slug>/: results.json, factsheet.md, plots.tar (the fact sheet's PNG plots, packed:
# the device tool brings back at most 8 files; unpack it beside factsheet.md) -- the suite's own
# output, to commit under reports/<gpu-slug>/ as it came -- and pytest.log (the run, with its time).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp/gpuprobe-out}}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
slug=$(python3 -c '
import sys
from gpuprobe.gpu import device_identity, gpu_unavailable_reason
from gpuprobe.report import gpu_slug
reason = gpu_unavailable_reason()
sys.exit(f"device-check: {reason}") if reason else print(gpu_slug(device_identity(0).name))') || exit 2
mkdir -p "$out/$slug"
started=$(date +%s)
python3 -m pytest probes/ -q -rs --require-gpu --gpuprobe-out "$out/$slug" 2>&1 | tee "$out/$slug/pytest.log"
status=${PIPESTATUS[0]}
echo "device-check: pytest probes/ exited $status after $(( $(date +%s) - started )) s" | tee -a "$out/$slug/pytest.log"
if compgen -G "$out/$slug/*.png" > /dev/null; then
    (cd "$out/$slug" && tar -cf plots.tar -- *.png && rm -f -- *.png)
fi
exit "$status"
