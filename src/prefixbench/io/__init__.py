"""Results on disk and in other tools' shapes: Parquet schemas, atomic writers and validating
readers (`artifacts`), strict JSON, `vllm bench serve` names and `--requests-out` (`export`).

May import: `metrics`, `support`, `errors`.
"""
