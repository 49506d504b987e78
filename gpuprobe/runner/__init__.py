"""The one path to the GPU: the launcher every probe goes through (:mod:`~gpuprobe.runner.launcher`: the protocol
and its capabilities; CuPy's in :mod:`~gpuprobe.runner.cupy_launcher`, or the simulated device), every launch
checked (:mod:`~gpuprobe.runner.checked`); the device and its NVML readings, the GPUs of a node, and the flight
recorder."""
