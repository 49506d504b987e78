"""Source to checked cubin, on the CPU only: PTX expansion, the toolchain, SASS parsing, contracts, the check."""
