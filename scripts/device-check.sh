#!/usr/bin/env bash
# First contact with a new GPU and one measured run of the suite, bounded to fit one 10-minute job: from
# a checkout, with the machine's own packages (CuPy, NumPy, pytest, matplotlib, NVML), nothing installed
# (for a machine with no package index). Every stage is bounded, and a stage that fails or overruns never
# stops the next, so even a failed or cut-off run returns what is needed to fix it.
#
#   scripts/device-check.sh [OUT]     default OUT: $OUT if set, else /tmp/gpuprobe-out
#   DEADLINE=S (default 420): the full suite stops measuring S seconds after this script started
#   PACK_PLOTS=1: the plots are packed into one plots.tar, so the folder holds seven files whatever the
#                 plots (for a job runner that brings back only a few files)
#
# Stages:
#   0. the machine as found (nvidia-smi -q, the toolkit, the Python packages, the time plan)  -> env.txt
#   1. smoke: each family's cheapest probes once, each under a short limit, the stage within
#      SMOKE_S (default 120) seconds                                  -> smoke-results.json, first-contact.md
#   2. the full suite (pytest probes/ -m gpu) until the deadline; what it could not reach is recorded
#      not_run ("deadline") and the results say partial     -> results.json, factsheet.md, the plots (*.png)
#   3. the fact sheet rendered again from results.json if stage 2 was cut before writing it
# Everything lands in OUT/<gpu-slug>/, with the whole log in device-check.log; commit that folder under
# reports/<gpu-slug>/ as it came.
# The card's clocks and settings are read, never changed.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
out="${1:-${OUT:-/tmp/gpuprobe-out}}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# the defaults are the time plan's (gpuprobe/measure/plan.py), which a test holds the H200's plan to
read -r plan_deadline plan_smoke < <(python3 -c '
from gpuprobe.measure.plan import DEVICE_CHECK_DEADLINE_S, SMOKE_STAGE_S
print(int(DEVICE_CHECK_DEADLINE_S), int(SMOKE_STAGE_S))') || exit 2
deadline="${DEADLINE:-$plan_deadline}"
smoke_s="${SMOKE_S:-$plan_smoke}"
elapsed() { echo $(( $(date +%s) - started )); }

slug=$(python3 -c '
import sys
from gpuprobe.runner.gpu import device_identity, gpu_unavailable_reason
from gpuprobe.output.report import gpu_slug
reason = gpu_unavailable_reason()
sys.exit(f"device-check: {reason}") if reason else print(gpu_slug(device_identity(0).name))') || exit 2
dir="$out/$slug"
work=$(mktemp -d)
mkdir -p "$dir"

stages() {
echo "device-check: $(date -u +%FT%TZ) on $(hostname), GPU $slug, deadline ${deadline} s, smoke ${smoke_s} s"
{
    echo "== nvidia-smi -q"; timeout 30 nvidia-smi -q
    echo "== toolkit"; for tool in ptxas nvdisasm cuobjdump nvcc; do command -v "$tool" && "$tool" --version | tail -n 2; done
    echo "== the toolkit gpuprobe builds with"
    python3 -c 'from gpuprobe.build.toolchain import toolkit_description; print(toolkit_description())'
    echo "== python packages"; python3 --version
    python3 -m pip list 2>/dev/null | grep -iE '^(cupy|cuda|nvidia|numpy|pytest|matplotlib|tabulate)' || true
    echo "== time plan"; timeout 60 python3 -m gpuprobe run --plan --deadline "$deadline"
} > "$dir/env.txt" 2>&1
echo "device-check: stage 0 (the machine as found) done after $(elapsed) s: env.txt"

timeout -s INT -k 10 $(( smoke_s + 20 )) python3 -m gpuprobe run --smoke -o "$work/smoke" --deadline "$smoke_s" --probe-time-limit 15
echo "device-check: stage 1 (smoke) exited $? after $(elapsed) s"
[ -f "$work/smoke/results.json" ] && cp "$work/smoke/results.json" "$dir/smoke-results.json"
[ -f "$work/smoke/first-contact.md" ] && cp "$work/smoke/first-contact.md" "$dir/first-contact.md"

left=$(( deadline - $(elapsed) ))
if [ "$left" -gt 30 ]; then
    # SIGINT at the deadline plus a minute for the invariants and the fact sheet; SIGKILL 20 s after that.
    timeout -s INT -k 20 $(( left + 60 )) python3 -m pytest probes/ -m gpu -q -rs -p no:cacheprovider --require-gpu \
        --gpuprobe-out "$dir" --gpuprobe-deadline "$left" --probe-time-limit 60 --cooldown 2
    status=$?
    echo "device-check: stage 2 (pytest probes/ -m gpu) exited $status after $(elapsed) s"
else
    status=3
    echo "device-check: stage 2 skipped: only ${left} s left before the deadline"
fi

if [ -f "$dir/results.json" ] && [ ! -f "$dir/factsheet.md" ]; then
    timeout 90 python3 -m gpuprobe report "$dir/results.json"
    echo "device-check: stage 3 (fact sheet from results.json) exited $? after $(elapsed) s"
fi
if [ "${PACK_PLOTS:-0}" = 1 ] && compgen -G "$dir/*.png" > /dev/null; then
    (cd "$dir" && tar -cf plots.tar -- *.png && rm -f -- *.png)
fi
rm -rf "$work"
echo "device-check: done after $(elapsed) s; files: $(cd "$dir" && ls | tr '\n' ' ')"
return "$status"
}

stages 2>&1 | tee "$dir/device-check.log"
