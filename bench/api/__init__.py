"""Benchmark of the Command API: HTTP requests/s and batch commands/s beside the raw producer rate."""
