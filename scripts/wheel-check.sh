#!/usr/bin/env bash
# The package as a user installs it: build a wheel, install it into a fresh venv outside the checkout, and
# require `gpuprobe list`, `expectations` and `check --json` to answer exactly as they do from the
# checkout (a wheel that left out a kernel, a declaration or an expectation file answers differently),
# with the package's own folder written <gpuprobe>/ on both sides; and pytest there to load gpuprobe's plugin
# by its entry point.
# Run by .ci/run; needs a venv with pip (VENV, default the checkout's .venv, which the README's test command
# makes) and a package index.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Built from a copy of what git would commit (tracked files and untracked ones it does not ignore), so no
# stale build/ folder or ignored file can stand in for something the package leaves out.
mkdir "$work/src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work/src"
"$venv/bin/pip" wheel -q --no-deps -w "$work/wheel" "$work/src"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$work"/wheel/*.whl
cd "$work"  # outside the checkout: only the installed copy can answer
installed=$("$work/venv/bin/python" -c 'import gpuprobe, os; print(os.path.dirname(gpuprobe.__file__))')
case $installed in "$work"/venv/*) ;; *) echo "wheel-check: gpuprobe imports from $installed, not the wheel" >&2; exit 1 ;; esac
for command in "list" "expectations h200" "expectations b200" "check --json"; do
    # shellcheck disable=SC2086  # the command's words are meant to split
    "$work/venv/bin/gpuprobe" $command | sed "s#$installed/#<gpuprobe>/#g" > "$work/installed.out"
    # shellcheck disable=SC2086
    (cd "$repo" && "$venv/bin/python" -m gpuprobe $command) | sed "s#$repo/gpuprobe/#<gpuprobe>/#g" > "$work/checkout.out"
    if ! cmp -s "$work/installed.out" "$work/checkout.out"; then
        echo "wheel-check: 'gpuprobe $command' from the installed wheel differs from the checkout:" >&2
        diff "$work/checkout.out" "$work/installed.out" | head -20 >&2
        exit 1
    fi
    echo "wheel-check: 'gpuprobe $command' answers the same from the wheel ($(wc -l < "$work/installed.out") lines)"
done
# the pytest plugin, found by its entry point alone (no conftest.py out here): its options are pytest's.
# The help is written to a file first: piped into `grep -q`, pytest would die of SIGPIPE when grep stops
# reading at its first match, and pipefail would call that a missing plugin.
"$work/venv/bin/python" -m pytest --help > "$work/pytest-help.out"
if ! grep -q -- '--gpuprobe-device' "$work/pytest-help.out"; then
    echo "wheel-check: pytest does not load the installed wheel's plugin (no --gpuprobe-device in pytest --help)" >&2
    exit 1
fi
echo "wheel-check: pytest loads the installed plugin by its entry point"
