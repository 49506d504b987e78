"""Stands the simulated GPU in for a real one in every Python process of a device-check rehearsal.

``scripts/rehearse-device-check.sh`` puts this directory first on PYTHONPATH, so Python imports this
module at start-up in the script's processes and in every measuring child they start: the launch
path's three entry points (is a GPU there, what is it, the launcher factory) then answer with the
simulated GPU of ``gpuprobe/simulated/gpu.py`` (8 SMs, a 512 KiB split L2), and everything else (the stages,
the deadline, the files, the reports) runs as it would on a real GPU. ``GPUPROBE_REHEARSAL_OPTIONS``
(JSON) replaces simulated-GPU options (another seed, changed hardware, no faults).
``GPUPROBE_REHEARSAL_SETTINGS=fast`` makes this process's runs measure with each family's quick settings on
the simulated GPU (``fast_settings``, what ``gpuprobe demo`` measures with), for a test whose point is not
the default settings. ``GPUPROBE_REHEARSAL_PROBES`` (comma-separated probe names) makes this process's runs
measure those probes alone (their families cut to them: ``tests/helpers/families.py``), for a test about their
facts alone. Test support only.
"""

from __future__ import annotations

import json
import os

if os.environ.get("GPUPROBE_REHEARSAL") == "1":
    import gpuprobe.runner.cupy_launcher
    import gpuprobe.runner.device
    from gpuprobe.simulated.gpu import FaultyGpu, open_simulated, suite_options

    OPTIONS = suite_options(**{
        "name": "Rehearsal GPU", "faults": {"gp_launch_stamp": "hang"},
        **json.loads(os.environ.get("GPUPROBE_REHEARSAL_OPTIONS", "{}")),
    })  # fmt: skip

    gpuprobe.runner.device.gpu_unavailable_reason = lambda: None
    gpuprobe.runner.device.device_identity = lambda device_index=0: FaultyGpu(**OPTIONS).device()
    gpuprobe.runner.cupy_launcher.CupyLauncher = lambda cubin, device_index, signatures: open_simulated(
        cubin, device_index, signatures, **OPTIONS
    )

    if os.environ.pop("GPUPROBE_REHEARSAL_SETTINGS", None) == "fast":  # popped: not for the processes it starts
        import functools

        import gpuprobe.measure.session
        from gpuprobe.simulated.gpu import fast_settings

        suite = gpuprobe.measure.session.run_suite

        @functools.wraps(suite)
        def quick(*args, **kwargs):
            return suite(*args, **{"settings": fast_settings(), **kwargs})

        gpuprobe.measure.session.run_suite = quick

    probes = os.environ.pop("GPUPROBE_REHEARSAL_PROBES", None)  # popped: not for the processes it starts
    if probes:
        import gpuprobe.measure.session
        from tests.helpers.families import families_cut_to

        gpuprobe.measure.session.BY_NAME = families_cut_to(probes.split(","))
