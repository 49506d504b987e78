"""The expectations every measured fact is judged against read cleanly, on any machine.

A measured run judges its facts by the GPU model's expectation files (gpuprobe/expectations/); one that
does not read would otherwise be noticed only on a GPU, after the measuring. Read here as a run reads them.
"""

from __future__ import annotations

import pytest

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.judge.expectations import load_all


@pytest.mark.static
def test_every_expectation_file_reads() -> None:
    try:
        models = load_all()
    except GpuprobeError as exc:
        pytest.fail(str(exc), pytrace=False)
    assert models, "no expectation file: every GPU would be measured in discovery mode"
