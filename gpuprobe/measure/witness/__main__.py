"""``python -m gpuprobe.measure.witness``: the witness measurement ncu wraps (:mod:`gpuprobe.measure.witness.run`)."""

import sys

from gpuprobe.measure.witness.run import main

sys.exit(main())
