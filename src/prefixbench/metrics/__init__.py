"""Engine columns become tables: the per-request table and the summary row (`summary`), the
stability verdict (`stability`), inter-token latencies (`itl`) and MFU/MBU (`utilisation`).

May import: `system`, `engine`, `workload`, `scenario`, `physics`, `catalog`, `support`,
`errors`; the hindsight bound's per-run share comes from `study.bound` (see docs/design.md).
"""
