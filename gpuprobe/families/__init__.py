"""Measurement families: host-side planning, verification and analysis for each probe family.

Each family is a package here (``alu/``, ``wgmma/``, ...) with its kernels in ``ptx/<family>/``; it
turns launches of its probes (through :class:`gpuprobe.runner.launcher.Launcher`) into facts. The flat
modules beside them are the toolkit the families share (``base``, ``measuring``, ``planning``, ...);
``catalog`` lists the families and collects what they export. Everything here runs on any machine
against a simulated launcher; only the launcher needs a GPU.
"""
