#!/usr/bin/env bash
# First contact with a new GPU, one measured run of the suite, the hardware counters' witness of what some
# probes moved, and the suite again on the same board, bounded to fit one 10-minute job: from a checkout,
# with the machine's own packages (CuPy, NumPy, pytest, matplotlib, NVML), nothing installed (for a machine
# with no package index). Every stage is bounded, and a stage that fails or overruns never stops the next,
# so even a failed or cut-off run returns what is needed to fix it.
#
#   scripts/device-check.sh [OUT]     default OUT: $OUT if set, else /tmp/gpuprobe-out
#   SMOKE_S=S (default 60): the smoke stage's budget
#   DEADLINE=S (default 355): the full suite stops measuring S seconds after this script started
#   WITNESS_S=S (default 90): the witness stage's budget
#   REPEAT_DEADLINE=S (default 560): the second run stops measuring S seconds after this script started
#   END=S (default 590): every stage is held to end by then (the device tool's command runs 600 s at most)
#   PACK_PLOTS=1: the plots are packed into one plots.tar, so the folder holds eight files whatever the
#                 plots (for a job runner that brings back only a few files)
#   GPUPROBE_COMMIT=SHA: the commit this checkout was made from, where it travels without its .git
#
# Stages:
#   0. the machine as found (nvidia-smi -q, the toolkit, the Python packages, the time plan)  -> env.txt
#   1. smoke: first every probe no real run under reports/ has proven, then each family's cheapest probes,
#      once each under a short limit, the stage within SMOKE_S seconds -> smoke-results.json, first-contact.md
#   2. the full suite (pytest probes/ -m gpu) until the deadline; what it could not reach is recorded
#      not_run ("deadline") and the results say partial          -> results.json, the plots (*.png)
#   3. the witness: Nsight Compute's counters of the bytes the goodput, bandwidth and copy probes moved,
#      written into results.json beside the suite's own figures (no ncu, or no permission: one line, skipped)
#   4. the fact sheet rendered from results.json, judged with every fact the stages wrote -> factsheet.md
#   5. the suite again on the same board, back to back, until REPEAT_DEADLINE, and gpuprobe compare of
#      the two runs (what they both measured): the false WORSE and BETTER the README's promise rests on
# Everything lands in OUT/<gpu-slug>/, with the whole log in device-check.log and the second run (its results,
# its sheet, the comparison, ncu's raw table) in repeat.tar; commit that folder under reports/<gpu-slug>/ as
# it came. The card's clocks and settings are read, never changed.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
out="${1:-${OUT:-/tmp/gpuprobe-out}}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# the defaults are the time plan's (gpuprobe/measure/plan.py), which a test holds the H200's plan to
read -r plan_smoke plan_deadline plan_witness plan_repeat plan_end < <(python3 -c '
from gpuprobe.measure import plan
print(*(int(s) for s in (plan.SMOKE_STAGE_S, plan.DEVICE_CHECK_DEADLINE_S, plan.WITNESS_STAGE_S,
                         plan.REPEAT_DEADLINE_S, plan.DEVICE_CHECK_END_S)))') || exit 2
smoke_s="${SMOKE_S:-$plan_smoke}"
deadline="${DEADLINE:-$plan_deadline}"
witness_s="${WITNESS_S:-$plan_witness}"
repeat_deadline="${REPEAT_DEADLINE:-$plan_repeat}"
end="${END:-$plan_end}"  # the job's own end, within the device tool's 600 s command: every stage is held to it
elapsed() { echo $(( $(date +%s) - started )); }

slug=$(python3 -c '
import sys
from gpuprobe.runner.device import device_identity, gpu_unavailable_reason
from gpuprobe.output.factsheet import gpu_slug
reason = gpu_unavailable_reason()
sys.exit(f"device-check: {reason}") if reason else print(gpu_slug(device_identity(0).name))') || exit 2
dir="$out/$slug"
work=$(mktemp -d)
mkdir -p "$dir" "$work/repeat"

stages() {
echo "device-check: $(date -u +%FT%TZ) on $(hostname), GPU $slug, smoke ${smoke_s} s, deadline ${deadline} s," \
     "witness ${witness_s} s, second run until ${repeat_deadline} s"
{
    echo "== nvidia-smi -q"; timeout 30 nvidia-smi -q
    echo "== toolkit"; for tool in ptxas nvdisasm cuobjdump nvcc ncu; do command -v "$tool" && "$tool" --version | tail -n 2; done
    echo "== the toolkit gpuprobe builds with"
    python3 -c 'from gpuprobe.kernels.toolchain import toolkit_description; print(toolkit_description())'
    echo "== python packages"; python3 --version
    python3 -m pip list 2>/dev/null | grep -iE '^(cupy|cuda|nvidia|numpy|pytest|matplotlib|tabulate)' || true
    echo "== time plan"; timeout 60 python3 -m gpuprobe run --plan --deadline "$deadline"
} > "$dir/env.txt" 2>&1
echo "device-check: stage 0 (the machine as found) done after $(elapsed) s: env.txt"

timeout -s INT -k 10 $(( smoke_s + 20 )) python3 -m gpuprobe run --smoke --unproven-first reports -o "$work/smoke" \
    --deadline "$smoke_s" --probe-time-limit 15
echo "device-check: stage 1 (smoke, the unproven probes first) exited $? after $(elapsed) s"
[ -f "$work/smoke/results.json" ] && cp "$work/smoke/results.json" "$dir/smoke-results.json"
[ -f "$work/smoke/first-contact.md" ] && cp "$work/smoke/first-contact.md" "$dir/first-contact.md"

left=$(( deadline - $(elapsed) ))
if [ "$left" -gt 30 ]; then
    # SIGINT at the deadline plus a minute for the invariants and the fact sheet; SIGKILL 20 s after that.
    timeout -s INT -k 20 $(( left + 60 )) python3 -m pytest probes/ -m gpu -q -rs -p no:cacheprovider --require-gpu \
        --gpuprobe-out "$dir" --gpuprobe-deadline "$left" --gpuprobe-probe-time-limit 60 --gpuprobe-cooldown 2
    status=$?
    echo "device-check: stage 2 (pytest probes/ -m gpu) exited $status after $(elapsed) s"
else
    status=3
    echo "device-check: stage 2 skipped: only ${left} s left before the deadline"
fi

if [ -f "$dir/results.json" ]; then
    budget=$(( witness_s < end - $(elapsed) - 120 ? witness_s : end - $(elapsed) - 120 ))
    if [ "$budget" -gt 20 ]; then
        timeout -k 10 "$budget" python3 -m gpuprobe witness "$dir/results.json" -o "$work/witness" \
            --timeout $(( budget - 10 ))
        echo "device-check: stage 3 (the counters' witness) exited $? after $(elapsed) s"
        [ -f "$work/witness/ncu.csv" ] && cp "$work/witness/ncu.csv" "$work/repeat/witness-ncu.csv"
    else
        echo "device-check: stage 3 skipped: only $(( end - $(elapsed) )) s left of the job"
    fi
    timeout 90 python3 -m gpuprobe report "$dir/results.json"
    echo "device-check: stage 4 (the fact sheet, judged with every fact) exited $? after $(elapsed) s"
fi
if [ "${PACK_PLOTS:-0}" = 1 ] && compgen -G "$dir/*.png" > /dev/null; then
    (cd "$dir" && tar -cf plots.tar -- *.png && rm -f -- *.png)
fi

# the second run ends at its deadline, and its SIGINT, its sheet and the comparison before the job's end
left=$(( (repeat_deadline < end - 40 ? repeat_deadline : end - 40) - $(elapsed) ))
if [ -f "$dir/results.json" ] && [ "$left" -gt 30 ]; then
    timeout -s INT -k 5 $(( left + 15 )) python3 -m gpuprobe run -o "$work/repeat" --deadline "$left" \
        --probe-time-limit 60 --cooldown 2 > "$work/repeat/run.log" 2>&1
    echo "device-check: stage 5 (the suite again, on the same board) exited $? after $(elapsed) s"
    if [ -f "$work/repeat/results.json" ]; then
        timeout 20 python3 -m gpuprobe compare "$dir/results.json" "$work/repeat/results.json" > "$work/repeat/compare.txt"
        echo "device-check: stage 5 compare exited $? (1: something WORSE); its first lines and summary:"
        head -n 8 "$work/repeat/compare.txt"; grep -E '^summary:' "$work/repeat/compare.txt"
    fi
else
    echo "device-check: stage 5 skipped: only ${left} s left before the second run's deadline"
fi
kept=$(cd "$work/repeat" && ls results.json factsheet.md compare.txt run.log witness-ncu.csv 2>/dev/null)
[ -n "$kept" ] && (cd "$work/repeat" && tar -cf "$dir/repeat.tar" -- $kept)
rm -rf "$work"
rm -f -- "$dir"/*.index.json  # the fleet's facts index, derived from results.json beside it: not part of the record
echo "device-check: done after $(elapsed) s; files: $(cd "$dir" && ls | tr '\n' ' ')"
return "$status"
}

stages 2>&1 | tee "$dir/device-check.log"
