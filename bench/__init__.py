"""Benchmarks: `make bench` (python -m bench) runs every bench/bench_*.py and prints a table."""
