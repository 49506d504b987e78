"""``python -m gpuprobe.families.wgmma > ptx/wgmma/wgmma.ptx``: regenerate the wgmma kernels."""

from gpuprobe.families.wgmma.ptx import module_text

print(module_text(), end="")
