"""A hardware witness for the bytes the probes say they moved: Nsight Compute's counters beside the suite's claims.

``gpuprobe witness RESULTS.json`` (:mod:`.command`) runs the witnessed probes once more under ``ncu``
(:mod:`.ncu`): the measuring process is the suite's own (:mod:`.run`), ncu only wraps it. Each probe's
measurement lies in an NVTX range naming it, so each launch ncu counted (:mod:`.counters`) belongs to a probe;
each probe's series ``launch`` says what each of its launches moved, and :mod:`.compare` holds the one to the
other. The facts land in RESULTS.json as ``witness.*``, judged by a built-in rule
(:func:`gpuprobe.judge.verdicts.judge_witness`) and shown in their own section of the fact sheet
(:mod:`gpuprobe.output.witness`).
"""
