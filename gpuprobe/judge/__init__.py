"""Judgement, on the CPU only: statistics and level finding, expectations per GPU model, invariants."""
