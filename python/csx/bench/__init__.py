"""Benchmarks of the csx Python package (``python -m csx.bench``)."""
