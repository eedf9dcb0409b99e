"""numba_cache's benchmark suite; ``python benchmarks/run.py`` regenerates RESULTS.md."""
