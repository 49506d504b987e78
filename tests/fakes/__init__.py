"""Stand-ins for outside tools in tests: ``fake_ncu.py`` for Nsight Compute's ncu, over the simulated GPU."""
