"""Results in the shapes other tools read: strict JSON, `vllm bench serve` metric names,
per-request JSONL and CSV.

The metric names and units are those of vLLM's serving benchmark result file
(`vllm bench serve --save-result`, vllm/benchmarks/serve.py): ``mean_ttft_ms``,
``median_ttft_ms``, ``std_ttft_ms``, ``p99_ttft_ms`` and the same for ``tpot``, ``itl`` and
``e2el``; ``request_throughput`` (req/s), ``output_throughput`` and
``total_token_throughput`` (tok/s), ``request_goodput`` (req/s meeting the SLOs), and
``duration`` (s), ``completed``, ``failed``, ``total_input_tokens``,
``total_output_tokens``. Percentile keys are ``p{p}`` with ``p`` printed as vLLM prints it
(``p99``, ``p99.9``).

This module has no numpy or polars at import so the CLI may import it for `--json`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)

# summary/agg column → vLLM bench serve name (only where the meaning is the same)
VLLM_NAMES = {
    "ttft_mean_ms": "mean_ttft_ms",
    "ttft_p50_ms": "median_ttft_ms",
    "ttft_p90_ms": "p90_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    "tpot_mean_ms": "mean_tpot_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "tpot_p90_ms": "p90_tpot_ms",
    "tpot_p99_ms": "p99_tpot_ms",
    "e2e_mean_ms": "mean_e2el_ms",
    "e2e_p50_ms": "median_e2el_ms",
    "e2e_p90_ms": "p90_e2el_ms",
    "e2e_p99_ms": "p99_e2el_ms",
    "throughput_rps": "request_throughput",
    "throughput_tok_s": "output_throughput",
    "goodput_rps": "request_goodput",
    "itl_mean_ms": "mean_itl_ms",
    "itl_p50_ms": "median_itl_ms",
    "itl_p90_ms": "p90_itl_ms",
    "itl_p99_ms": "p99_itl_ms",
}


def strict(obj):
    """``obj`` with every NaN or ±inf replaced by None (JSON null), recursively; numpy
    scalars and paths become plain values."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # a numpy scalar
        return strict(obj.item())
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def dumps(obj, indent: int | None = 2) -> str:
    """Strict JSON: NaN and infinities are null, never the bare tokens JSON parsers reject."""
    return json.dumps(strict(obj), allow_nan=False, indent=indent, ensure_ascii=False)


def vllm_name(key: str) -> str:
    """The vLLM bench serve name of a summary column (with an agg suffix such as _ci95)."""
    for suffix in ("_ci95", ""):
        base = key[: -len(suffix)] if suffix and key.endswith(suffix) else key
        if base in VLLM_NAMES and (not suffix or key.endswith(suffix)):
            return VLLM_NAMES[base] + suffix
    return key


def renamed(row: dict) -> dict:
    """A summary or aggregate row with the metrics that have a vLLM name renamed."""
    return {vllm_name(k): v for k, v in row.items()}


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    """``"50,90,99"`` → (50.0, 90.0, 99.0); each in (0, 100]."""
    from prefixbench.errors import PrefixbenchError

    if not text:
        return DEFAULT_PERCENTILES
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            p = float(part)
        except ValueError:
            p = math.nan
        if not (0 < p <= 100):
            raise PrefixbenchError(
                f"not a percentile: '{part}'",
                where="--percentiles",
                fix="give numbers in (0, 100], e.g. 50,90,99",
            )
        out.append(p)
    return tuple(dict.fromkeys(out))


def pkey(p: float) -> str:
    """vLLM's percentile key: p99, p99.9."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def bench_metrics(
    requests, summary: dict, percentiles=DEFAULT_PERCENTILES, stats: dict | None = None
) -> dict:
    """One policy's result in vLLM bench serve form, from its per-request table (steady
    state, completed requests, as the summary), its summary row (throughputs) and the
    engine's stats (the pooled inter-token gaps of the measured requests, itl.py; null
    when the run tracked no gaps)."""
    import polars as pl

    steady = requests.filter(~pl.col("warmup"))
    done = steady.filter(pl.col("outcome") == "completed")
    completed = done.height
    rps = summary.get("throughput_rps")
    duration = completed / rps if completed and rps else None
    total_in = int(done["prompt_tokens"].sum()) if completed else 0
    total_out = int(done["output_tokens"].sum()) if completed else 0
    out = {
        "duration": duration,
        "completed": completed,
        "failed": steady.height - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": rps,
        "request_goodput": summary.get("goodput_rps"),
        "output_throughput": summary.get("throughput_tok_s"),
        "total_token_throughput": (total_in + total_out) / duration if duration else None,
    }
    for metric, col in (
        ("ttft", "ttft_ms"),
        ("tpot", "tpot_ms"),
        ("itl", None),
        ("e2el", "e2e_ms"),
    ):
        if col is None:
            out.update(_itl_metrics(stats or {}, percentiles))
            continue
        vals = done[col].drop_nulls().drop_nans()
        have = len(vals) > 0
        out[f"mean_{metric}_ms"] = float(vals.mean()) if have else None
        out[f"median_{metric}_ms"] = float(vals.quantile(0.5, "linear")) if have else None
        out[f"std_{metric}_ms"] = float(vals.std(ddof=0)) if have else None
        for p in percentiles:
            out[f"{pkey(p)}_{metric}_ms"] = (
                float(vals.quantile(p / 100, "linear")) if have else None
            )
    return out


def _itl_metrics(stats: dict, percentiles) -> dict:
    """vLLM's itl keys from the engine's pooled gap histogram (itl.py)."""
    from prefixbench.metrics.itl import itl_mean_ms, itl_quantile_ms, itl_std_ms

    out = {
        "mean_itl_ms": itl_mean_ms(stats),
        "median_itl_ms": itl_quantile_ms(stats, 0.5),
        "std_itl_ms": itl_std_ms(stats),
    }
    for p in percentiles:
        out[f"{pkey(p)}_itl_ms"] = itl_quantile_ms(stats, p / 100)
    return out


def run_result(
    scenario: dict, requests, summary_rows: list[dict], percentiles, notes, stats=None
) -> dict:
    """`run --json`: the scenario (re-runnable with `prefixbench run FILE`), then per policy
    the vLLM-named metrics and every prefixbench summary field; ``stats`` (policy → the
    engine's stats) gives the itl metrics."""
    import polars as pl

    results = []
    for row in summary_rows:
        reqs = requests.filter(pl.col("policy") == row["policy"])
        st = (stats or {}).get(row["policy"])
        results.append(
            {
                "policy": row["policy"],
                **bench_metrics(reqs, row, percentiles, st),
                "prefixbench": row,
            }
        )
    return {
        "scenario": scenario,
        "percentiles": list(percentiles),
        "notes": list(notes),
        "results": results,
    }


def write_requests(requests, path: Path) -> Path:
    """The per-request table as JSONL (.jsonl) or CSV (.csv), written atomically; NaN
    timestamps of stages a request never reached become null / empty."""
    import os
    import tempfile

    import polars as pl

    from prefixbench.errors import PrefixbenchError

    path = Path(path)
    fmt = path.suffix.lower()
    if fmt not in (".jsonl", ".csv"):
        raise PrefixbenchError(
            f"unknown per-request format '{path.suffix}'",
            where=str(path),
            fix="name the file .jsonl or .csv (Parquet is always written to --out)",
        )
    floats = [c for c, t in requests.schema.items() if t in (pl.Float32, pl.Float64)]
    df = requests.with_columns([pl.col(c).fill_nan(None) for c in floats])
    try:  # a read-only folder, a folder under a regular file, a name past NAME_MAX
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise PrefixbenchError(
            f"cannot write {path}: {e.strerror or e}", where=str(path), fix="pick a writable folder"
        ) from None
    os.close(fd)
    try:
        if fmt == ".jsonl":
            df.write_ndjson(tmp)
        else:
            df.write_csv(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # as the Parquet files
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise PrefixbenchError(
            f"cannot write {path}: {e.strerror or e}", where=str(path), fix="check the folder"
        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
