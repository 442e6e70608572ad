"""Benchmarks, run from a checkout: `python bench/run.py ...` (see bench/run.py)."""
