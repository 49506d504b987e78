"""Measurement families: host-side planning, verification and analysis for each probe family.

Each family turns launches of its probes (through :class:`gpuprobe.runner.gpu.Launcher`) into facts.
Everything here runs on any machine against a simulated launcher; only the launcher needs a GPU.
"""
