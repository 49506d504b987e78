"""Simulations of each family's kernels for the simulated GPU (see tests/fake_gpu.py)."""
