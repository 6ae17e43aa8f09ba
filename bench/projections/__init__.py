"""Benchmarks and the synthetic decision workload of the projections."""
