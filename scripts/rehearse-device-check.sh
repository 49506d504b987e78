#!/usr/bin/env bash
# The device check rehearsed on a machine with no GPU: scripts/device-check.sh run as on a GPU machine
# (from a checkout, PACK_PLOTS=1), against the simulated GPU (tests/rehearsal/sitecustomize.py stands it in) and
# a stand-in ncu (tests/fakes/fake_ncu.py), with short deadlines so the full stage and the second run are cut
# (the launch kernel hangs); then its files are held to what the real run must leave
# (tests/rehearsal/check_outputs.py). Run by .ci/run; about four minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export GPUPROBE_REHEARSAL=1 PYTHONPATH="$PWD/tests/rehearsal:$PWD" GPUPROBE_LOCK_DIR="$out/locks"
export PATH="$PWD/.venv/bin:$PATH" DEADLINE="${DEADLINE:-120}" SMOKE_S="${SMOKE_S:-60}" PACK_PLOTS=1
export WITNESS_S="${WITNESS_S:-60}" REPEAT_DEADLINE="${REPEAT_DEADLINE:-220}"
# Nsight Compute stood in by tests/fakes/fake_ncu.py (it counts the simulated GPU's launches), first on PATH
mkdir -p "$out/bin"
printf '#!/bin/sh\nexec python3 "%s/tests/fakes/fake_ncu.py" "$@"\n' "$PWD" > "$out/bin/ncu"
chmod +x "$out/bin/ncu"
export PATH="$out/bin:$PATH"
started=$(date +%s)
scripts/device-check.sh "$out/OUT" > "$out/stdout.txt" 2>&1 || true
echo "rehearse-device-check: device-check.sh took $(( $(date +%s) - started )) s (deadline ${DEADLINE} s)"
GPUPROBE_REHEARSAL=0 python3 tests/rehearsal/check_outputs.py "$out/OUT/rehearsal-gpu" "$REPEAT_DEADLINE" || {
    echo "rehearse-device-check: the device check's own output follows"; cat "$out/stdout.txt"; exit 1
}
