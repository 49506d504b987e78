#!/usr/bin/env bash
# The static check (`gpuprobe check`: every probe compiled for every supported arch, its SASS
# contract checked) under each toolkit the suite accepts, not only the newest that pip resolves:
#
#   ptxas     12.8.93 (the oldest supported, nvidia-cuda-nvcc-cu12), 13.0.88 (CUDA 13.0's, as on the H200 measured in reports/),
#             and the newest (this venv's nvidia-cuda-nvcc)
#   nvdisasm  13.2.86 (the oldest on PyPI, nvidia-cuda-nvdisasm) and the newest (this venv's)
#
# Every pair runs (newest with newest as well, which the README's test command checks too), and
# for each ptxas the two nvdisasm must give the same `check --json` (every verdict, resource and
# instruction count), so a change in nvdisasm's listing that gpuprobe misreads shows here.
# The old tools go into a temporary directory (pip install --no-deps --target), each pair is chosen
# with GPUPROBE_TOOLKIT, and a private GPUPROBE_CACHE makes every build cold. Exit status 1 on any violation,
# error or disagreement, after running everything.
#
#   scripts/toolkit-matrix.sh            uses .venv/bin/python, or $PYTHON
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuprobe-toolkits.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" GPUPROBE_CACHE="$work/cache"
unset GPUPROBE_TOOLKIT
started=$(date +%s)

fetch() {  # fetch DIR REQUIREMENT: the wheel's files under $work/DIR
    "$python" -m pip install -q --disable-pip-version-check --no-deps --target "$work/$1" "$2" || exit 2
}
fetch ptxas-12.8 nvidia-cuda-nvcc-cu12==12.8.93
fetch ptxas-13.0 nvidia-cuda-nvcc==13.0.88
fetch nvdisasm-13.2 nvidia-cuda-nvdisasm==13.2.86
newest() {  # the directory of the tool this venv finds by itself
    "$python" -c "from gpuprobe.build.toolchain import find_tool; print(find_tool('$1').parent)"
}
newest_ptxas=$(newest ptxas) && newest_nvdisasm=$(newest nvdisasm) || exit 2
work=$(realpath "$work")  # gpuprobe records the tools' real paths, compared with these below
declare -A ptxas=([12.8]="$work/ptxas-12.8/nvidia/cuda_nvcc/bin" [13.0]="$work/ptxas-13.0/nvidia/cu13/bin"
                  [newest]="$newest_ptxas")
declare -A nvdisasm=([13.2]="$work/nvdisasm-13.2/nvidia/cu13/bin" [newest]="$newest_nvdisasm")
echo "toolkit-matrix: tools fetched after $(( $(date +%s) - started )) s"

failed=0
for p in 12.8 13.0 newest; do
    for d in 13.2 newest; do
        name="ptxas-$p.nvdisasm-$d"
        # One directory holding just this pair (links): the newest wheel's bin/ holds both tools.
        mkdir -p "$work/$name"
        ln -sf "${ptxas[$p]}/ptxas" "$work/$name/ptxas"
        ln -sf "${nvdisasm[$d]}/nvdisasm" "$work/$name/nvdisasm"
        export GPUPROBE_TOOLKIT="$work/$name"
        t0=$(date +%s)
        toolkit=$("$python" -c "from gpuprobe.build.toolchain import toolkit_description; print(toolkit_description())" 2>&1)
        echo "toolkit-matrix: $toolkit"
        if [[ $toolkit != *"(${ptxas[$p]}/ptxas,"* || $toolkit != *"(${nvdisasm[$d]}/nvdisasm,"* ]]; then
            echo "toolkit-matrix:   not the ptxas of ${ptxas[$p]} and the nvdisasm of ${nvdisasm[$d]}"
            failed=1
            continue
        fi
        "$python" -m gpuprobe check > "$work/$name.log" 2>&1
        status=$?
        "$python" -m gpuprobe check --json > "$work/$name.json" 2> /dev/null
        echo "toolkit-matrix:   $(tail -n 1 "$work/$name.log") (exit $status, $(( $(date +%s) - t0 )) s)"
        if (( status != 0 )); then
            grep -E '^(VIOLATED|ERROR) |^    ' "$work/$name.log" | head -n 60
            failed=1
        fi
    done
    if ! cmp -s "$work/ptxas-$p.nvdisasm-13.2.json" "$work/ptxas-$p.nvdisasm-newest.json"; then
        echo "toolkit-matrix: ptxas $p: nvdisasm 13.2 and the newest disagree about what gpuprobe reads:"
        diff "$work/ptxas-$p.nvdisasm-13.2.json" "$work/ptxas-$p.nvdisasm-newest.json" | head -n 40
        failed=1
    fi
done
unset GPUPROBE_TOOLKIT
echo "toolkit-matrix: $([[ $failed == 0 ]] && echo passed || echo FAILED) after $(( $(date +%s) - started )) s"
exit "$failed"
