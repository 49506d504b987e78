"""What every stage shares: errors, atomic files, the cache, arch names and the results schema."""
