"""Device records of real parts, as ``device_identity`` would read them, for plans and judgements in tests.

The figures are what each part reports through ``cudaGetDeviceProperties`` (SM count, L2, memory,
clocks, bus width, shared memory), from the datasheets and device queries cited in
``gpuprobe/expectations``; nothing here is a measurement.
"""

from __future__ import annotations

from gpuprobe.core.results import Device

KIB, MIB = 2**10, 2**20

H200 = Device(
    name="NVIDIA H200", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=60 * MIB,
    sm_clock_nominal_mhz=1980.0, mem_clock_mhz=3201.0, mem_bus_bits=6144, mem_bytes=150_754_820_096,
    shared_per_sm_bytes=228 * KIB, shared_per_block_optin_bytes=227 * KIB,
)  # fmt: skip
H100_SXM = Device(
    name="NVIDIA H100 80GB HBM3", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * MIB,
    sm_clock_nominal_mhz=1980.0, mem_clock_mhz=2619.0, mem_bus_bits=5120, mem_bytes=85_045_870_592,
    shared_per_sm_bytes=228 * KIB, shared_per_block_optin_bytes=227 * KIB,
)  # fmt: skip
A100_SXM = Device(
    name="NVIDIA A100-SXM4-80GB", cc="8.0", arch="sm_80", sm_count=108, l2_bytes=40 * MIB,
    sm_clock_nominal_mhz=1410.0, mem_clock_mhz=1593.0, mem_bus_bits=5120, mem_bytes=85_097_971_712,
    shared_per_sm_bytes=164 * KIB, shared_per_block_optin_bytes=163 * KIB,
)  # fmt: skip
