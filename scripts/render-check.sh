#!/usr/bin/env bash
# The HTML fact sheet in a real browser: headless Chromium at 1400x900 must render the sheet of the real
# H200 run (reports/nvidia-h200/) and of a whole simulated run, show every key plot decoded and readable,
# and show the Answers block and the start of the headline table above the fold (scripts/render_check.py
# says what it checks). The screenshots are left in OUT (default: a temporary folder, removed after).
# Run by .ci/run after the other scripts; installs the Debian package chromium with apt-get when it is
# missing and fails when it cannot. About a minute and a half on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium > /dev/null; then
    echo "render-check: installing chromium (apt-get)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } > /dev/null; then
        echo "render-check: chromium is missing and could not be installed (apt-get install chromium)" >&2
        exit 1
    fi
fi
out=${1:-}
if [ -z "$out" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
GPUPROBE_LOCK_DIR="$out/locks" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/render_check.py "$out"
