"""Engine columns become tables: the per-request table and the summary row (`summary`), the
stability verdict (`stability`), inter-token latencies (`itl`), MFU/MBU (`utilisation`) and
the hindsight bound's per-run share (`bound`, docs/model.md §4.8).

May import: `system`, `engine`, `workload`, `scenario`, `physics`, `catalog`, `registry`,
`support`, `errors`.
"""
