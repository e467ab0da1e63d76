"""Reading a results folder: each study artifact by kind, and the command that makes a
missing one (shared by `plot`, `report` and `recommend`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import read_artifact

from ..errors import ArtifactError

# which command writes each input file (for the error a missing file raises)
MAKER = {
    "agg": "prefixbench sweep --out {r}",
    "runs": "prefixbench sweep --out {r}",
    "prefixes": "prefixbench sweep --out {r}",
    "crossover": "prefixbench crossover {r}",
    "recommendations": "prefixbench report {r}",
}


def load(results: Path, kind: str) -> pl.DataFrame:
    """Read ``results/<kind>.parquet``; a missing file names the command that makes it."""
    results = Path(results)
    if not results.is_dir():
        raise ArtifactError(
            "results folder not found",
            where=str(results),
            fix=f"run `{MAKER['agg'].format(r=results)}` first",
        )
    path = results / f"{kind}.parquet"
    if not path.is_file():
        raise ArtifactError(
            f"missing {kind} file",
            where=str(path),
            fix=f"run `{MAKER[kind].format(r=results)}` first",
        )
    return read_artifact(path, kind)
