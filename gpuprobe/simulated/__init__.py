"""The simulated GPU: every probe's kernels run as NumPy models of what their PTX computes, with timing
models of a small made-up part. It lets `gpuprobe demo` show what a run produces on a machine with no
GPU, and the tests exercise everything but the launch. Nothing it produces is a measurement: its
results say ``device.simulated = true`` and every page rendered from them says SIMULATED."""
