"""Long-running services of a worker process: execution and the LISTEN session."""
