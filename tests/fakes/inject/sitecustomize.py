"""Every Python process the fake ncu wraps: the simulated GPU stands in for a real one (as in a device-check
rehearsal: ``tests/rehearsal/sitecustomize.py``), and its launches and NVTX ranges are logged for the fake ncu
to count (:mod:`tests.fakes.counters`), as ncu's injection counts a real process's. Test support only."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[2] / "rehearsal" / "sitecustomize.py"))
if os.environ.get("FAKE_NCU_LOG_DIR"):
    from tests.fakes.counters import install

    install(Path(os.environ["FAKE_NCU_LOG_DIR"]))
