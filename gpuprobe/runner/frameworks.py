"""What the frameworks family gets from a GPU: PyTorch's matmul (``torch.matmul``, ``torch._scaled_mm`` for e4m3),
gpuprobe's own Triton matmul (:mod:`gpuprobe.runner.triton_matmul`) and PyTorch's scaled-dot-product attention
restricted to one backend, each timed by CUDA events between clock stamps on the launcher's own stream (the
capability :class:`Frameworks`, opened by :func:`open_frameworks`).

None of PyTorch, cuDNN or Triton is a dependency of gpuprobe: each is imported when first used, in the measuring
process, and one that is missing is a :class:`~gpuprobe.runner.launcher.LaunchPathUnavailable` naming it (the
family's probe is then ``not_run`` with that reason).

One stream. CuPy enqueues on its current stream (the legacy default stream unless a CuPy stream is made current,
or ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM`` is set), PyTorch on ``torch.cuda.current_stream()`` (its default stream
unless one is set), and Triton on PyTorch's current stream. So every call here binds PyTorch to CuPy's current
stream (``torch.cuda.ExternalStream`` on CuPy's stream pointer, PyTorch's default stream when that pointer is the
legacy default stream's, 0) and checks that PyTorch and Triton both report that stream before anything is enqueued:
the hold, the first clock stamp, the start event, the framework's calls, the stop event and the second stamp are
then one stream's work, in that order, and the stamps bracket the calls alone.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.runner.flight import RecordingLauncher
from gpuprobe.runner.launcher import GEMM_TYPES, LaunchPathUnavailable, Stamp
from gpuprobe.runner.triton_tiles import triton_refusal

if TYPE_CHECKING:  # the measuring side's: imported where they are used
    from gpuprobe.runner.cupy_launcher import CupyLauncher

MATMUL_LIBRARIES = ("torch", "triton")
ATTENTION_BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION"}  # library -> SDPBackend member
ATTENTION_NAMES = {"cudnn": "cuDNN", "flash": "FlashAttention"}
TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "e4m3": "float8_e4m3fn"}
HOLD_PER_CALL = 4  # holding-spin launches' worth per framework call: a call's Python and dispatch cost several
SEED = 20250901
TORCH_MISSING = "PyTorch is not installed"
TRITON_MISSING = "Triton is not installed"
WHY_CHARS = 300  # of the warnings PyTorch gives for refusing every SDPA kernel: the reason a probe is not run


@dataclass(frozen=True)
class Work:
    """One framework call, repeated in a timed batch. ``library`` "torch" or "triton": a ``dtype`` matmul C = A @ B
    of two n x n row-major matrices of random integers in the type's ``GEMM_TYPES`` value range (every product and
    sum exact: the ladder's cuBLAS operands, as many random bits as the type holds), ``shape`` = (n,); "cudnn" or
    "flash": scaled-dot-product attention of random normal q, k and v through that backend alone, ``shape`` =
    (batch, heads, sequence, head dim), ``causal`` with the causal mask."""

    library: str
    dtype: str
    shape: tuple[int, ...]
    causal: bool = False

    def __post_init__(self) -> None:
        if self.library not in (*MATMUL_LIBRARIES, *ATTENTION_BACKENDS) or self.dtype not in TORCH_DTYPES:
            raise ValueError(f"Work: no {self.dtype} {self.library} work")
        if len(self.shape) != (4 if self.attention else 1) or min(self.shape) < 1:
            wanted = "(batch, heads, sequence, head dim)" if self.attention else "(n,)"
            raise ValueError(f"Work: {self.library} takes {wanted}, not {self.shape}")

    @property
    def attention(self) -> bool:
        return self.library in ATTENTION_BACKENDS

    @property
    def flop(self) -> float:
        """What the work must do: 2 n^3 for a matmul; 4 B H S^2 D for attention (its two matmuls, the softmax not
        counted), halved with the causal mask (FlashAttention-3's count)."""
        if not self.attention:
            return 2.0 * self.shape[0] ** 3
        batch, heads, sequence, dim = self.shape
        return 4.0 * batch * heads * sequence**2 * dim / (2 if self.causal else 1)


class Frameworks(Protocol):
    """PyTorch and Triton on the launcher's device and stream (the frameworks family)."""

    def time_framework(self, work: Work, count: int, stamp: Stamp) -> float:
        """GPU milliseconds of ``count`` calls of ``work`` on random operands (made once per work, on the device,
        and kept), between two CUDA events, after an untimed first call (which picks the algorithm, or compiles
        the kernel). ``stamp`` = (kernel, blocks, out): a kernel of the cubin taking ``(.u32 slot, .u64 out)``,
        launched with ``blocks`` blocks on the same stream right before the timed calls (slot 0) and right after
        them (slot 1), outside the events and inside the hold. :class:`LaunchPathUnavailable` where the library,
        the type or the backend is missing here."""

    def framework_sample(self, work: Work, rows: list[int], cols: list[int]) -> dict[str, np.ndarray]:
        """Parts of the last call's operands and result as float64, for the host to check: a matmul's A rows
        ``rows`` ("a", rows x K), B columns ``cols`` ("b", K x cols) and C at those rows and columns ("c");
        attention's last batch and head: q at query rows ``rows`` ("q"), all of k and v ("k", "v"), and the output
        at those rows ("o"). ``cols`` is not used by attention."""


def open_frameworks(launcher: Any) -> Frameworks:
    """The frameworks of ``launcher``'s process: a simulated launcher brings its own (``frameworks()``); a CuPy one
    is joined by :class:`CupyFrameworks`. Under the flight recorder its calls are recorded like the launcher's own
    (``frameworks.time_framework``). :class:`LaunchPathUnavailable` for a launcher that is neither."""
    recorder = launcher if isinstance(launcher, RecordingLauncher) else None
    inner = recorder.wrapped if recorder else launcher
    own = getattr(inner, "frameworks", None)
    if own is not None:
        frameworks: Any = own()
    elif hasattr(inner, "_cp") and hasattr(inner, "_enqueue"):
        frameworks = CupyFrameworks(inner)
    else:
        raise LaunchPathUnavailable("this launcher has no Frameworks (neither CuPy's nor the simulated GPU's)")
    return recorder.recording(frameworks, "frameworks") if recorder else frameworks


def backend_missing(library: str, why: str) -> str:
    """Why an attention backend cannot run here: "PyTorch has no cuDNN SDPA backend here (why)"."""
    return f"PyTorch has no {ATTENTION_NAMES[library]} SDPA backend here ({why})"


def first_line(exc: BaseException) -> str:
    """An exception's first line, or its type's name where it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Prepared:
    """A work's operands on the device and its call; ``output`` holds the last call's result."""

    call: Callable[[], Any]
    operands: dict[str, Any]
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    output: list[Any] = field(default_factory=list)

    def run(self, count: int) -> None:
        """``count`` calls, enqueued, inside the work's context (an SDPA backend's); the last result kept."""
        with self.context():
            for _ in range(count):
                result = self.call()
            self.output[:] = [result]


class CupyFrameworks:
    """:class:`Frameworks` beside a :class:`~gpuprobe.runner.cupy_launcher.CupyLauncher`: PyTorch (and Triton
    through it) on the launcher's device, bound to CuPy's current stream, the stamps and the hold the launcher's."""

    def __init__(self, launcher: CupyLauncher) -> None:
        self._launcher = launcher
        self._prepared: dict[Work, Prepared] = {}

    # ---- the libraries, imported when first used ----------------------------------------
    def _torch(self) -> Any:
        try:
            import torch
        except ImportError:
            raise LaunchPathUnavailable(TORCH_MISSING) from None
        if not torch.cuda.is_available():
            raise LaunchPathUnavailable("PyTorch cannot use CUDA here (torch.cuda.is_available() is False)")
        return torch

    def _triton_matmul(self) -> Callable[[Any, Any, Any], None]:
        try:
            from gpuprobe.runner import triton_matmul
        except ImportError as exc:
            missing = getattr(exc, "name", "") or ""
            reason = TRITON_MISSING if missing.split(".")[0] == "triton" else first_line(exc)
            raise LaunchPathUnavailable(reason) from None
        too_small = triton_refusal(self._launcher.device().shared_per_block_optin_bytes)
        if too_small:
            raise LaunchPathUnavailable(too_small)
        return triton_matmul.matmul

    @contextlib.contextmanager
    def _bound(self) -> Iterator[Any]:
        """PyTorch on the launcher's device with CuPy's current stream as its current stream, checked (with
        Triton's, where Triton is loaded) before anything is enqueued."""
        torch, cp = self._torch(), self._launcher._cp
        index = self._launcher.device_index
        pointer = int(cp.cuda.get_current_stream().ptr)
        stream = torch.cuda.default_stream(index) if pointer == 0 else torch.cuda.ExternalStream(pointer, device=index)
        with torch.cuda.device(index), torch.cuda.stream(stream):
            streams = {"PyTorch": int(torch.cuda.current_stream(index).cuda_stream)}
            driver = _triton_driver()
            if driver is not None:
                streams["Triton"] = int(driver.get_current_stream(index))
            strays = {name: hex(s) for name, s in streams.items() if s != pointer}
            if strays:
                raise ProbeFailure(f"the framework's stream is not CuPy's ({pointer:#x}): {strays}; the clock stamps "
                                   "would not bracket its work")  # fmt: skip
            yield torch

    # ---- the work -------------------------------------------------------------------------
    def _prepare(self, work: Work) -> Prepared:
        """``work``'s operands (random, made on the device by a seeded generator) and its call, made once and run
        once untimed (the algorithm picked, the kernel compiled, the operands written)."""
        if work not in self._prepared:
            with self._bound() as torch:
                prepared = self._attention(torch, work) if work.attention else self._matmul(torch, work)
                _first_call(work, prepared)
                torch.cuda.synchronize()
            self._prepared[work] = prepared
        return self._prepared[work]

    def _matmul(self, torch: Any, work: Work) -> Prepared:
        n, dtype = work.shape[0], getattr(torch, TORCH_DTYPES[work.dtype], None)
        if dtype is None:
            raise LaunchPathUnavailable(f"this PyTorch has no {TORCH_DTYPES[work.dtype]} type")
        if work.dtype == "e4m3":
            _require_scaled_mm(torch)
        matmul = self._triton_matmul() if work.library == "triton" else None
        generator, span = torch.Generator(device="cuda").manual_seed(SEED), GEMM_TYPES[work.dtype].value_range
        drawn = (torch.randint(-span, span + 1, (n, n), device="cuda", generator=generator) for _ in range(2))
        a, b = (values.float().to(dtype) for values in drawn)
        if work.dtype == "e4m3":
            return _scaled_mm(torch, a, b)
        c = torch.empty(n, n, device="cuda", dtype=dtype)

        def call() -> Any:
            if matmul is None:
                return torch.matmul(a, b, out=c)
            matmul(a, b, c)
            return c

        return Prepared(call, {"a": a, "b": b})

    def _attention(self, torch: Any, work: Work) -> Prepared:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            raise LaunchPathUnavailable("this PyTorch has no torch.nn.attention.sdpa_kernel") from None
        member = ATTENTION_BACKENDS[work.library]
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            raise LaunchPathUnavailable(backend_missing(work.library, f"no SDPBackend.{member}"))
        if work.library == "cudnn" and not torch.backends.cudnn.is_available():
            raise LaunchPathUnavailable(backend_missing(work.library, "cuDNN is not available"))
        generator = torch.Generator(device="cuda").manual_seed(SEED)
        dtype = getattr(torch, TORCH_DTYPES[work.dtype])
        q, k, v = (torch.randn(*work.shape, device="cuda", generator=generator).to(dtype) for _ in range(3))
        attend = torch.nn.functional.scaled_dot_product_attention
        return Prepared(lambda: attend(q, k, v, is_causal=work.causal), {"q": q, "k": k, "v": v},
                        lambda: sdpa_kernel([backend]))  # fmt: skip

    # ---- the capability -------------------------------------------------------------------
    def time_framework(self, work: Work, count: int, stamp: Stamp) -> float:
        prepared = self._prepare(work)
        with self._bound():
            return self._launcher.stamped_ms(lambda: prepared.run(count), HOLD_PER_CALL * count + 2, stamp)

    def framework_sample(self, work: Work, rows: list[int], cols: list[int]) -> dict[str, np.ndarray]:
        prepared = self._prepare(work)
        with self._bound():
            return _attention_parts(prepared, rows) if work.attention else _matmul_parts(prepared, rows, cols)


def _first_call(work: Work, prepared: Prepared) -> None:
    """The untimed first call. An attention backend that refuses the inputs or the GPU ("No available kernel": it
    is the only backend allowed) is LaunchPathUnavailable, with the warnings PyTorch gave for it."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            prepared.run(1)
        except RuntimeError as exc:
            if not work.attention or "no available kernel" not in str(exc).lower():
                raise
            why = "; ".join(first_line(Warning(w.message)) for w in said)[:WHY_CHARS] or first_line(exc)
            raise LaunchPathUnavailable(backend_missing(work.library, why)) from None


def _require_scaled_mm(torch: Any) -> None:
    """LaunchPathUnavailable where PyTorch cannot run an e4m3 matmul on this GPU."""
    if not hasattr(torch, "_scaled_mm"):
        raise LaunchPathUnavailable("this PyTorch has no torch._scaled_mm (its e4m3 matmul)")
    if torch.cuda.get_device_capability() < (8, 9):
        raise LaunchPathUnavailable("e4m3 matmuls need sm_89 or later")


def _scaled_mm(torch: Any, a: Any, b: Any) -> Prepared:
    """e4m3 x e4m3 -> bf16 with unit tensor-wise scales and FP32 accumulation (``use_fast_accum`` off), B
    column-major as cuBLASLt's FP8 GEMM takes it."""
    column_major = b.t().contiguous().t()
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def call() -> Any:
        result = torch._scaled_mm(a, column_major, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                  use_fast_accum=False)  # fmt: skip
        return result[0] if isinstance(result, tuple) else result  # an older PyTorch gives (result, amax)

    return Prepared(call, {"a": a, "b": column_major})


def _host(rows: list[Any]) -> np.ndarray:
    """Device vectors (views, of any type: e4m3 too) copied to the host one by one, converted there, stacked."""
    return np.stack([row.cpu().float().numpy() for row in rows]).astype(np.float64)


def _matmul_parts(prepared: Prepared, rows: list[int], cols: list[int]) -> dict[str, np.ndarray]:
    a, b, (c,) = prepared.operands["a"], prepared.operands["b"], prepared.output
    return {"a": _host([a[i] for i in rows]), "b": _host([b[:, j] for j in cols]).T,
            "c": _host([c[i] for i in rows])[:, cols]}  # fmt: skip


def _attention_parts(prepared: Prepared, rows: list[int]) -> dict[str, np.ndarray]:
    q, k, v, o = (*(prepared.operands[name][-1, -1] for name in "qkv"), prepared.output[0][-1, -1])
    return {"q": _host([q[i] for i in rows]), "k": _host([k])[0], "v": _host([v])[0], "o": _host([o[i] for i in rows])}


def _triton_driver() -> Any:
    """Triton's active driver where Triton is already loaded (it launches on the stream this reports), else None."""
    import sys

    runtime = sys.modules.get("triton.runtime")
    active = getattr(getattr(runtime, "driver", None), "active", None)
    return active if active is not None and hasattr(active, "get_current_stream") else None
