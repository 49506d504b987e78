#!/usr/bin/env bash
# The static check (`gpuprobe check`: every probe compiled for every supported arch, its SASS
# contract checked) under each toolkit the suite accepts, not only the newest that pip resolves:
#
#   ptxas     12.8.93 (the oldest supported, nvidia-cuda-nvcc-cu12), 13.0.88 (CUDA 13.0's, as on the H200 measured in reports/),
#             and the newest (this venv's nvidia-cuda-nvcc)
#   nvdisasm  13.2.86 (the oldest on PyPI, nvidia-cuda-nvdisasm) and the newest (this venv's)
#
# The CUDA C++ probes' PTX comes from NVRTC and is assembled by the ptxas of the row, so each ptxas
# comes with the NVRTC, runtime headers (cooperative_groups) and CCCL of its own release (12.8.93,
# 12.8.90 and 12.8.90; 13.0.88, 13.0.96 and 13.0.85; the newest: what this venv finds), as a
# toolkit of that release would have them: a ptxas cannot read the PTX of a newer NVRTC.
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
fetch nvrtc-12.8 nvidia-cuda-nvrtc-cu12==12.8.93
fetch runtime-12.8 nvidia-cuda-runtime-cu12==12.8.90
fetch cccl-12.8 nvidia-cuda-cccl-cu12==12.8.90
fetch ptxas-13.0 nvidia-cuda-nvcc==13.0.88
fetch nvrtc-13.0 nvidia-cuda-nvrtc==13.0.88
fetch runtime-13.0 nvidia-cuda-runtime==13.0.96
fetch cccl-13.0 nvidia-cuda-cccl==13.0.85
fetch nvdisasm-13.2 nvidia-cuda-nvdisasm==13.2.86
newest() {  # the directory of the tool this venv finds by itself
    "$python" -c "from gpuprobe.kernels.toolchain import find_tool; print(find_tool('$1').parent)"
}
newest_ptxas=$(newest ptxas) && newest_nvdisasm=$(newest nvdisasm) || exit 2
# This venv's NVRTC folder, the folder of its cooperative_groups.h, and the root of its CCCL (whose
# include/ or include/cccl holds cuda/std): what GPUPROBE_TOOLKIT searches in.
mapfile -t newest_cuda < <("$python" -c "
from gpuprobe.kernels import nvrtc
print(nvrtc.locate_nvrtc().path.parent)
dirs = nvrtc.include_dirs()
print(next(d for d in dirs if (d / nvrtc.COOPERATIVE_GROUPS).is_file()))
cccl = next(d for d in dirs if (d / nvrtc.LIBCUDACXX).is_file())
print(cccl.parent.parent if cccl.name == 'cccl' else cccl.parent)") || exit 2
work=$(realpath "$work")  # gpuprobe records the tools' real paths, compared with these below
declare -A ptxas=([12.8]="$work/ptxas-12.8/nvidia/cuda_nvcc/bin" [13.0]="$work/ptxas-13.0/nvidia/cu13/bin"
                  [newest]="$newest_ptxas")
declare -A nvdisasm=([13.2]="$work/nvdisasm-13.2/nvidia/cu13/bin" [newest]="$newest_nvdisasm")
declare -A nvrtc=([12.8]="$work/nvrtc-12.8/nvidia/cuda_nvrtc/lib" [13.0]="$work/nvrtc-13.0/nvidia/cu13/lib"
                  [newest]="${newest_cuda[0]}")
declare -A headers=([12.8]="$work/runtime-12.8/nvidia/cuda_runtime/include"
                    [13.0]="$work/runtime-13.0/nvidia/cu13/include" [newest]="${newest_cuda[1]}")
declare -A cccl=([12.8]="$work/cccl-12.8/nvidia/cuda_cccl" [13.0]="$work/cccl-13.0/nvidia/cu13"
                 [newest]="${newest_cuda[2]}")
echo "toolkit-matrix: tools fetched after $(( $(date +%s) - started )) s"

failed=0
for p in 12.8 13.0 newest; do
    for d in 13.2 newest; do
        name="ptxas-$p.nvdisasm-$d"
        # One directory holding just this pair (links): the newest wheel's bin/ holds both tools. Beside
        # them the release's NVRTC (lib/) and runtime headers (include/); its CCCL is a second directory.
        mkdir -p "$work/$name"
        ln -sf "${ptxas[$p]}/ptxas" "$work/$name/ptxas"
        ln -sf "${nvdisasm[$d]}/nvdisasm" "$work/$name/nvdisasm"
        ln -sfn "${nvrtc[$p]}" "$work/$name/lib"
        ln -sfn "${headers[$p]}" "$work/$name/include"
        export GPUPROBE_TOOLKIT="$work/$name:${cccl[$p]}"
        t0=$(date +%s)
        toolkit=$("$python" -c "from gpuprobe.kernels.toolchain import toolkit_description; print(toolkit_description())" 2>&1)
        echo "toolkit-matrix: $toolkit"
        if [[ $toolkit != *"(${ptxas[$p]}/ptxas,"* || $toolkit != *"(${nvdisasm[$d]}/nvdisasm,"*
              || $toolkit != *"($(realpath "${nvrtc[$p]}")/libnvrtc.so"* ]]; then
            echo "toolkit-matrix:   not the ptxas of ${ptxas[$p]}, the nvdisasm of ${nvdisasm[$d]}, the NVRTC of ${nvrtc[$p]}"
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
