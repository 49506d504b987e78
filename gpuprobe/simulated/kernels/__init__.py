"""Simulations of each family's kernels for the simulated GPU (see gpuprobe/simulated/gpu.py)."""
