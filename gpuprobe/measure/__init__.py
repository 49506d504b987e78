"""A run: the time plan, isolation and the measuring child, the GPU lock, clock conditions, the session."""
