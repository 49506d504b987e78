"""cuBLASLt's matmul through ctypes: CuPy binds cuBLAS, not cuBLASLt, and cuBLAS's own GEMM has no fp8. libcublas
links libcublasLt, so once CuPy has loaded cuBLAS the process has it mapped; it is looked for there
(``/proc/self/maps``), then beside libcublas, of the CUDA major CuPy's libcublas is (``libcublasLt.so.13`` for
cupy-cuda13x: another major's copy, a PyTorch's or a system directory's, is never taken). Only what one TN GEMM
needs: a handle, a matmul descriptor (the compute and scale types, A transposed), three matrix layouts, the
heuristic's first algorithm and its workspace.

The enumerators and the heuristic result's layout are cublasLt.h's and library_types.h's (as triton-lang/triton
mirrors them in third_party/nvidia/include/cublas_types.h): cublasLtMatmulDescAttributes_t TRANSA 3, TRANSB 4;
cublasLtMatmulPreferenceAttributes_t MAX_WORKSPACE_BYTES 1 (a uint64_t); cudaDataType CUDA_R_32F 0;
cublasLtMatmulHeuristicResult_t = {cublasLtMatmulAlgo_t algo (uint64_t data[8]), size_t workspaceSize,
cublasStatus_t state, float wavesCount, int reserved[4]}: 96 bytes, workspaceSize at 64.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

from gpuprobe.runner.launcher import GemmShape, LaunchPathUnavailable

CUBLASLT_MATMUL_DESC_TRANSA = 3
CUBLASLT_MATMUL_DESC_TRANSB = 4
CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1
CUBLAS_OP_T, CUBLAS_OP_N = 1, 0
CUDA_R_32F = 0
HEURISTIC_RESULT_BYTES = 96  # cublasLtMatmulHeuristicResult_t: algo (64 B), workspaceSize, state, wavesCount, 4 int
WORKSPACE_SIZE_OFFSET = 64
WORKSPACE_BYTES = 32 * 1024 * 1024  # the most workspace an algorithm may ask for (cuBLAS's own default on Hopper)


def mapped_library(soname: str, maps: str = "/proc/self/maps") -> Path | None:
    """The file of the shared library ``soname`` (``libcublasLt.so.13``: that name or a longer version of it) this
    process has mapped, None if none."""
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return None
    paths = (Path(line.split(maxsplit=5)[-1]) for line in lines if f"/{soname}" in line)
    return next((path for path in paths if path.name == soname or path.name.startswith(f"{soname}.")), None)


def load(major: int) -> ctypes.CDLL:
    """libcublasLt of CUDA major ``major`` (CuPy's libcublas's) as the process has it (mapped as libcublas's
    dependency), or beside the libcublas of that major it has; LaunchPathUnavailable with the reason when neither
    is there."""
    lt, cublas_name = f"libcublasLt.so.{major}", f"libcublas.so.{major}"
    path = mapped_library(lt)
    if path is None:
        cublas = mapped_library(cublas_name)
        beside = sorted(cublas.parent.glob(f"{lt}*")) if cublas else []
        if not beside:
            where = f"beside {cublas}" if cublas else f"in this process (no {cublas_name} mapped)"
            raise LaunchPathUnavailable(f"cuBLASLt cannot be loaded here (no {lt} {where})")
        path = beside[0]
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise LaunchPathUnavailable(f"cuBLASLt cannot be loaded here ({exc})") from None


class CublasLt:
    """One cuBLASLt handle and the matmuls made with it."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._lib = library
        self._handle = ctypes.c_void_p()
        self._check("cublasLtCreate", ctypes.byref(self._handle))

    def _check(self, function: str, *args: object) -> None:
        status = getattr(self._lib, function)(*args)
        if status != 0:
            raise RuntimeError(f"{function} returned cuBLAS status {status}")

    def _layout(self, data_type: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
        layout = ctypes.c_void_p()
        self._check("cublasLtMatrixLayoutCreate", ctypes.byref(layout), ctypes.c_int(data_type), ctypes.c_uint64(rows),
                    ctypes.c_uint64(cols), ctypes.c_int64(ld))  # fmt: skip
        return layout

    def matmul(self, shape: GemmShape, types: tuple[int, int, int], pointers: tuple[int, int, int],
               workspace: int) -> Callable[[int], None]:  # fmt: skip
        """A call enqueuing C = A . B^T of ``shape`` (row-major A m x k, B n x k, C m x n: column-major, cuBLASLt's
        C^T = op_T(B) . A with m and n swapped) on the stream it is given: ``types`` = (input type, C's type, compute
        type), float32 alpha 1 and beta 0, ``pointers`` = device A, B, C; the heuristic's first algorithm within
        :data:`WORKSPACE_BYTES` of ``workspace``. RuntimeError where cuBLASLt has no algorithm for it."""
        m, n, k = shape
        in_type, out_type, compute = types
        desc = ctypes.c_void_p()
        self._check("cublasLtMatmulDescCreate", ctypes.byref(desc), ctypes.c_int(compute), ctypes.c_int(CUDA_R_32F))
        for attribute, op in ((CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T), (CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N)):
            value = ctypes.c_int32(op)
            self._check("cublasLtMatmulDescSetAttribute", desc, ctypes.c_int(attribute), ctypes.byref(value),
                        ctypes.c_size_t(4))  # fmt: skip
        a_layout, b_layout = self._layout(in_type, k, n, k), self._layout(in_type, k, m, k)
        c_layout = self._layout(out_type, n, m, n)
        preference = ctypes.c_void_p()
        self._check("cublasLtMatmulPreferenceCreate", ctypes.byref(preference))
        limit = ctypes.c_uint64(WORKSPACE_BYTES)
        attribute = ctypes.c_int(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        self._check(
            "cublasLtMatmulPreferenceSetAttribute", preference, attribute, ctypes.byref(limit), ctypes.c_size_t(8)
        )
        result, found = ctypes.create_string_buffer(HEURISTIC_RESULT_BYTES), ctypes.c_int(0)
        self._check("cublasLtMatmulAlgoGetHeuristic", self._handle, desc, a_layout, b_layout, c_layout, c_layout,
                    preference, ctypes.c_int(1), result, ctypes.byref(found))  # fmt: skip
        if found.value < 1:
            raise RuntimeError(f"cuBLASLt has no algorithm for a {shape} GEMM of these types")
        workspace_size = ctypes.c_size_t.from_buffer(result, WORKSPACE_SIZE_OFFSET).value
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        a, b, c = (ctypes.c_void_p(p) for p in pointers)

        def call(stream: int) -> None:
            self._check("cublasLtMatmul", self._handle, desc, ctypes.byref(alpha), b, a_layout, a, b_layout,
                        ctypes.byref(beta), c, c_layout, c, c_layout, result, ctypes.c_void_p(workspace),
                        ctypes.c_size_t(workspace_size), ctypes.c_void_p(stream))  # fmt: skip

        return call
