"""Many results files: compare against a baseline, repeatability, fleets of GPUs and node runs."""
