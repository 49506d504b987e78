"""What several test modules share: devices, the measuring processes, fuzz cases, an issue-sweep smoke run, the
registered probes' checks from the modules ``gpuprobe check`` builds (docs/testing.md has the rules)."""
