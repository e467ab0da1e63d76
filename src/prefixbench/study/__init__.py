"""The study: grids of scenarios run resumably (`grid`, `sweep`, `backends`), aggregated over
seeds (`aggregate`), and the answers drawn from them: `recommend`, `crossover`, `decision`
and `decision_map` (`map`), `compare`, `capacity`, the hindsight `bound`, the `report` and
the `plots`.

May import: `io`, `metrics`, `system`, `engine`, `workload`, `scenario`, `physics`, `catalog`,
`render`, `registry`, `support`, `errors`. Importing the package declares every study artifact kind
(`io.artifacts.register`), so a reader of any kind finds its schema.
"""

from prefixbench.study import (  # noqa: F401 - each declares its artifact kinds
    aggregate,
    capacity_table,
    crossover,
    decision,
    decision_map,
    disagg,
    recommend,
    sweep,
)
