"""The benchmark's measurements, one module each; `python benchmarks/run.py` runs them
(docs/performance.md)."""
