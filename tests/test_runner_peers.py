"""The multi-GPU runner (gpuprobe/runner/peers.py, gpuprobe/runner/nccl.py) held to the installed CuPy,
NVML and CuPy's compiled NCCL binding, as tests/test_cuda_api.py holds gpu.py: every library name it
uses exists and every call binds to the function's signature. No GPU, and no NCCL library, is needed:
where CuPy cannot load NCCL, the binding's names and signatures are read from its compiled module.
Then how a measuring process records the group's calls, and how NCCL is asked for its log."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
from pathlib import Path

import pytest

from gpuprobe.runner import flight, nccl, peers
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.simulated.gpu import SimulatedGpu
from tests.test_cuda_api import ApiScan, _embedded_signatures

NCCL_BINDING = next(
    Path(importlib.util.find_spec("cupy_backends.cuda.libs").submodule_search_locations[0]).glob("nccl*.so")
)


def test_every_library_use_in_peers_py_exists_and_takes_its_arguments() -> None:
    scan = ApiScan(Path(peers.__file__).read_text())
    assert not scan.problems, "\n".join(str(p) for p in scan.problems)
    expected = {
        "cupy.cuda.runtime.memcpyPeerAsync", "cupy.cuda.runtime.deviceCanAccessPeer",
        "cupy.cuda.runtime.deviceEnablePeerAccess", "cupy.cuda.runtime.CUDARuntimeError", "cupy.cuda.Event",
        "cupy.cuda.stream.Event.record", "cupy.cuda.get_elapsed_time", "cupy.cuda.memory.MemoryPointer.device_id",
        "pynvml.nvmlDeviceGetP2PStatus", "pynvml.NVML_P2P_CAPS_INDEX_NVLINK", "pynvml.NVML_P2P_STATUS_OK",
        "pynvml.nvmlDeviceGetNvLinkState", "pynvml.NVML_NVLINK_MAX_LINKS", "pynvml.nvmlDeviceGetTopologyCommonAncestor",
    }  # fmt: skip
    assert expected <= scan.uses, sorted(expected - scan.uses)


def _binding_names() -> set[str]:
    """Every name CuPy's compiled NCCL module holds: its functions and methods, and its constants."""
    strings = set(re.findall(rb"[A-Za-z_][A-Za-z0-9_]{2,}", NCCL_BINDING.read_bytes()))
    return {s.decode() for s in strings}


@pytest.mark.filterwarnings("ignore:\\s*nccl library could not be loaded")
def test_every_use_of_the_nccl_binding_in_nccl_py_is_a_name_it_has() -> None:
    """Where CuPy cannot load NCCL (as here, without the library) the scan cannot see the binding's names:
    each name it could not resolve must be one the compiled binding holds; any other problem fails."""
    scan = ApiScan(Path(nccl.__file__).read_text())
    names = _binding_names()
    for problem in scan.problems:
        missing = re.search(r"cupy\.cuda\.nccl has no attribute (\w+)", problem.problem)
        unknown = "NcclCommunicator.initAll" in problem.text and "not known to the scan" in problem.problem
        assert (missing and missing[1] in names) or unknown, str(problem)
    assert {"cupy.cuda.Device", "cupy.cuda.stream.Event.record", "cupy.cuda.stream.Stream.ptr"} <= scan.uses


def test_every_communicator_call_binds_to_the_signature_the_binding_embeds() -> None:
    signatures = _embedded_signatures(NCCL_BINDING)
    tree = ast.parse(Path(nccl.__file__).read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]
    on_comm = [c for c in calls if isinstance(c.func.value, ast.Name) and c.func.value.id == "comm"]
    assert {c.func.attr for c in on_comm} == {"allReduce", "allGather", "reduceScatter", "broadcast", "send", "recv"}
    for call in on_comm:
        signature = signatures[call.func.attr]
        signature.bind(None, *call.args)  # self, then the arguments nccl.py passes: a TypeError if they do not fit
    init_all = next(c for c in calls if c.func.attr == "initAll")
    signatures["initAll"].bind(*init_all.args)
    for function in ("groupStart", "groupEnd", "get_version"):
        assert inspect.signature(lambda: None).parameters.keys() == signatures[function].parameters.keys(), function
    assert {"NCCL_FLOAT32", "NCCL_SUM"} <= _binding_names()


def test_without_the_nccl_library_the_communicator_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from cupy.cuda import nccl as binding

    monkeypatch.setattr(binding, "available", False)
    with pytest.raises(LaunchPathUnavailable, match=r"pip install 'gpuprobe\[nccl\]'"):
        nccl.CupyCommunicator(None, 2)  # type: ignore[arg-type]


def test_nccl_is_asked_for_its_tuning_log_unless_the_user_chose_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"):
        monkeypatch.delenv(name, raising=False)
    path = nccl._debug_log()
    assert path is not None and os.environ["NCCL_DEBUG_FILE"] == str(path)
    assert os.environ["NCCL_DEBUG"] == "INFO" and "TUNING" in os.environ["NCCL_DEBUG_SUBSYS"]
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.delenv("NCCL_DEBUG_FILE")
    assert nccl._debug_log() is None and os.environ["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_FILE" not in os.environ


def test_a_measuring_process_records_the_groups_calls_in_its_one_sequence() -> None:
    records: list[dict] = []
    returned: list[int] = []
    recorder = flight.RecordingLauncher(SimulatedGpu(peer_node={"count": 2}), records.append,
                                        lambda n, ms, error: returned.append(n))  # fmt: skip
    recorder.alloc(64)
    group = peers.open_peer_group(recorder)
    assert group.count() == 2
    buffer = group.on(1).alloc(4096)
    group.on(1).fill(buffer, 0)
    calls = [r["call"] for r in records]
    assert calls == ["alloc", "peers.on", "peers.on(1).alloc", "peers.on", "peers.on(1).fill"]
    assert [r["n"] for r in records] == returned == [1, 2, 3, 4, 5]
    assert records[2]["nbytes"] == 4096 and records[4]["value"] == 0  # named as the Launcher protocol names them


def test_a_plain_launcher_is_joined_by_cupy_and_a_simulated_one_brings_its_node() -> None:
    gpu = SimulatedGpu(peer_node={"count": 3})
    assert peers.open_peer_group(gpu) is gpu.peer_group() and gpu.peer_group().count() == 3
    assert peers.CupyPeerGroup.__init__.__annotations__["home"] == "CupyLauncher"
