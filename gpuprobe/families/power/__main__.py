"""``python -m gpuprobe.families.power > ptx/power/power_wgmma.ptx``: regenerate the power family's wgmma kernel."""

from gpuprobe.families.power.wgmma import module_text

print(module_text(), end="")
