"""The coupled-vs-disaggregated study of seed 001, as a named sweep (`sweep --study disagg`).

Arrival rates 1, 2, 4, 8, 16 req/s × mean prompt 128/256/512 × mean output 64/128/256 ×
links PCIe 3.0/4.0 and NVLink 3/4 × Llama-2 7B/13B/70B = 540 configurations. Each runs
1P1D disaggregated (transfer per request, no prefix sharing) and 2 colocated instances
(prefill priority) on 4×H100 SXM per instance; the study reports the throughput gain and
the TTFT speedup of disaggregated over coupled, as the seed does.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import register, write_atomic

RATES = [1.0, 2.0, 4.0, 8.0, 16.0]
PROMPTS = [128, 256, 512]
OUTPUTS = [64, 128, 256]
LINKS = ["pcie3-x16", "pcie4-x16", "nvlink3", "nvlink4"]
MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b"]
KEYS = ["model", "link", "rate", "prompt", "output"]
METRICS = [
    "throughput_rps",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "e2e_mean_ms",
    "reject_rate",
    "transfer_ms",
]

register(
    "disagg",
    {
        "model": pl.Utf8,
        "link": pl.Utf8,
        "rate": pl.Float64,
        "prompt": pl.Int64,
        "output": pl.Int64,
        **{f"{m}_{sys}": pl.Float64 for m in METRICS for sys in ("disagg", "coupled")},
        "throughput_gain": pl.Float64,
        "ttft_speedup": pl.Float64,
        "transfer_share_of_e2e": pl.Float64,
    },
)


def configs() -> list[dict]:
    return [
        dict(zip(KEYS, c, strict=True))
        for c in itertools.product(MODELS, LINKS, RATES, PROMPTS, OUTPUTS)
    ]


def scenario_for(c: dict, requests: int):
    from prefixbench.scenario.loader import validate

    return validate(
        {
            "name": "disagg_study",
            "model": c["model"],
            "cluster": {
                "prefill": {"accelerator": "h100-sxm", "devices": 4},
                "decode": {"accelerator": "h100-sxm", "devices": 4},
                "link": {"name": c["link"]},
            },
            "workload": {
                "kind": "synthetic",
                "arrivals": {"process": "poisson", "rate": c["rate"]},
                "prefixes": {"count": 1, "zipf_s": 0, "length": {"kind": "fixed", "value": 0}},
                "share_fraction": 0.0,
                "suffix_length": {"kind": "lognormal", "mean": c["prompt"], "cv": 0.25},
                "output_length": {"kind": "lognormal", "mean": c["output"], "cv": 0.25},
            },
            "run": {"requests": requests, "warmup_requests": requests // 10},
        },
        "disagg study",
    )


def run_config(c: dict, requests: int) -> dict:
    from .runs import run_scenario

    s = scenario_for(c, requests)
    row = dict(c)
    for label, mode in (("disagg", "disaggregated"), ("coupled", "colocated")):
        sc = s.model_copy(update={"cluster": s.cluster.model_copy(update={"mode": mode})})
        r = run_scenario(sc, ["transfer_per_request"], keep_requests=False).summary.to_dicts()[0]
        for m in METRICS:
            row[f"{m}_{label}"] = r[m]
    row["throughput_gain"] = row["throughput_rps_disagg"] / max(
        row["throughput_rps_coupled"], 1e-12
    )
    row["ttft_speedup"] = row["ttft_mean_ms_coupled"] / max(row["ttft_mean_ms_disagg"], 1e-12)
    row["transfer_share_of_e2e"] = row["transfer_ms_disagg"] / max(row["e2e_mean_ms_disagg"], 1e-12)
    return row


def run_study(
    out: Path,
    *,
    requests: int = 2000,
    jobs: int | None = None,
    limit: int | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_point: Callable[[object], None] | None = None,
) -> Path:
    """Run the 540 configurations (or the first ``limit``) and write ``disagg.parquet``."""
    todo = configs()[:limit] if limit else configs()
    if on_start:
        on_start(len(todo), 0)
    rows = []
    jobs = max(1, jobs or os.cpu_count() or 1)
    if jobs == 1:
        for c in todo:
            rows.append(run_config(c, requests))
            if on_point:
                on_point(c)
    else:
        from .backends import die_with_parent

        with ProcessPoolExecutor(
            jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=die_with_parent,  # a SIGKILLed parent must not leave workers behind
            initargs=(os.getpid(),),
        ) as ex:
            futs = [ex.submit(run_config, c, requests) for c in todo]
            for f in as_completed(futs):
                rows.append(f.result())
                if on_point:
                    on_point(None)
    df = pl.DataFrame(rows).sort(KEYS)
    return write_atomic(df, Path(out) / "disagg.parquet", "disagg", {"requests": requests})


def headline(df: pl.DataFrame) -> dict:
    """Mean, median and max of the throughput gain and TTFT speedup, as the seed reports."""
    out = {}
    for col in ("throughput_gain", "ttft_speedup"):
        s = df[col]
        out[col] = {"mean": float(s.mean()), "median": float(s.median()), "max": float(s.max())}
    out["transfer_share_of_e2e_mean"] = float(df["transfer_share_of_e2e"].mean())
    out["transfer_ms_mean"] = float(df["transfer_ms_disagg"].mean())
    return out


def heatmaps(df: pl.DataFrame, out: Path) -> list[Path]:
    """Throughput-gain and TTFT-speedup heatmaps: rate × prompt, faceted by model × link,
    averaged over output lengths (one PNG each)."""
    import os as _os
    import tempfile

    from plotnine import (
        aes,
        element_text,
        facet_grid,
        geom_text,
        geom_tile,
        ggplot,
        labs,
        scale_fill_gradient2,
        theme,
        theme_bw,
    )

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    g = df.group_by(["model", "link", "rate", "prompt"]).agg(
        pl.col("throughput_gain").mean(), pl.col("ttft_speedup").mean()
    )
    import pandas as pd  # plotnine's data frame (pyarrow-free conversion)

    pdf = pd.DataFrame(
        g.with_columns(pl.col("rate").cast(pl.Utf8), pl.col("prompt").cast(pl.Utf8)).to_dict(
            as_series=False
        )
    )
    pdf["rate"] = pd.Categorical(pdf["rate"], categories=[str(r) for r in RATES])
    for col, title, name in (
        (
            "throughput_gain",
            "Throughput of 1P1D disaggregated ÷ 2 colocated instances",
            "disagg_throughput_gain.png",
        ),
        (
            "ttft_speedup",
            "Mean TTFT of 2 colocated instances ÷ 1P1D disaggregated (>1: disaggregation faster)",
            "disagg_ttft_speedup.png",
        ),
    ):
        p = (
            ggplot(pdf, aes("rate", "prompt", fill=col))
            + geom_tile(color="white")
            + geom_text(aes(label=col), format_string="{:.2f}", size=6)
            + facet_grid("model ~ link")
            + scale_fill_gradient2(low="#b2182b", mid="#f7f7f7", high="#2166ac", midpoint=1.0)
            + labs(x="arrival rate (req/s)", y="mean prompt (tokens)", fill="ratio", title=title)
            + theme_bw()
            + theme(figure_size=(12, 7), plot_title=element_text(size=10))
        )
        fd, tmp = tempfile.mkstemp(suffix=".png", dir=out)
        _os.close(fd)
        p.save(tmp, dpi=150, verbose=False)
        _os.replace(tmp, out / name)
        paths.append(out / name)
    return paths
