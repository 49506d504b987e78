"""The one path to the GPU: the launcher every probe goes through (CuPy, or the simulated device), device
discovery, and the flight recorder."""
