"""Transfer vs recompute: analytic break-even per model × accelerator × link, and what the
simulation measured where sweep results exist.

Moving a prefix of L tokens costs latency + L·kv_bytes/(N·bandwidth) on the link, its KV
sharded over the decode instance's N NICs (one per device by default, docs/model.md
"NICs"); rebuilding
it on the decode instance costs the roofline time of an L-token prefill (costmodel
.recompute_time). Both exclude queueing; the simulated difference includes it.

With layer-wise streaming (``streaming="layerwise"``, docs/model.md §1.7.1) the decode
instance admits the request when its prefill starts, so both ways of getting the prefix
overlap the prefill of the request's own suffix (``suffix_tokens`` new tokens attending to
the cached prefix, priced on the same accelerator): the cached prefix's KV streams from
admission and the decode instance can recompute from admission. Each costs only what sticks
out past that step, ``max(0, t − t_suffix_prefill)``; a prefix short enough for both to hide
makes the choice moot (recorded as a transfer win: nothing to gain by recomputing), and
``hidden_until_prefix_tokens`` is the longest prefix whose transfer hides entirely.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from prefixbench.io.artifacts import register
from prefixbench.physics.costmodel import (
    Efficiency,
    InstanceCost,
    kv_bytes_per_token,
    link_rate,
    operator_time,
    recompute_time,
    transfer_fixed,
    transfer_time,
)

from .. import catalog
from ..catalog.formats import with_formats

REFERENCE_PREFIX = 2048  # tokens: the prefix length the tie bandwidth is quoted for
# tokens: the request's own suffix whose prefill hides a layer-wise stream (the mean suffix
# of the tool_call and enterprise_hotset presets is ~200 tokens)
REFERENCE_SUFFIX = 256
STREAMING = ("after_prefill", "layerwise")

register(
    "crossover",
    {
        "model": pl.Utf8,
        "accelerator": pl.Utf8,
        "link": pl.Utf8,
        "kv_bytes_per_token": pl.Int64,
        "transfer_us_per_token": pl.Float64,
        "recompute_us_per_token": pl.Float64,
        "transfer_ms_at_ref": pl.Float64,
        "recompute_ms_at_ref": pl.Float64,
        "link_gbytes_per_s": pl.Float64,
        "nics": pl.Int64,
        "tie_bandwidth_gbytes_per_s": pl.Float64,
        "breakeven_prefix_tokens": pl.Float64,
        "recompute_wins_from": pl.Float64,
        "recompute_wins_until": pl.Float64,
        "winner_at_ref": pl.Utf8,
        "sim_ttft_transfer_minus_recompute_ms": pl.Float64,
        "sim_scenarios": pl.Int64,
        "streaming": pl.Utf8,
        "hidden_until_prefix_tokens": pl.Float64,
    },
)


def suffix_prefill_time(cost: InstanceCost, suffix: int, prefix_lengths: np.ndarray):
    """The prefill step of one request's ``suffix`` new tokens after each cached prefix
    length (costmodel.prefill_time, vectorised over the prefix length)."""
    n = np.full_like(prefix_lengths, float(suffix))
    gemm, attn, kv_io = cost.prefill_split(n, prefix_lengths)
    t = operator_time(cost, gemm, float(suffix), cost.flops_rate_prefill, attn, kv_io)
    return t + cost.prefill_overhead + cost.comm_time(float(suffix))


def analytic_row(
    model: str,
    accelerator: str,
    link: str,
    devices: int = 1,
    eff: Efficiency | None = None,
    kv_dtype: str | None = None,
    nics: int | None = None,
    streaming: str = "after_prefill",
    suffix_tokens: int = REFERENCE_SUFFIX,
    link_update: dict | None = None,
) -> dict:
    """Break-even figures of one (model, decode accelerator, link), at ``kv_dtype`` if given.

    The KV moves over ``nics`` NICs of the link type in parallel (default: one per device,
    as cluster.link.nics_per_instance); bandwidths in the row are per NIC. With
    ``streaming="layerwise"`` both options are charged only past the suffix's prefill.
    ``link_update``: catalog link fields to override (as a scenario's cluster.link block:
    efficiency, setup_us, ceiling_gbps, latency_us)."""
    m = with_formats(catalog.get_model(model), kv_dtype=kv_dtype)
    dev = catalog.get_accelerator(accelerator)
    one = catalog.get_link(link)
    if link_update:
        one = one.model_copy(update=link_update)
    k = nics or devices
    ln = one if k == 1 else one.model_copy(update={"bandwidth_gbps": one.bandwidth_gbps * k})
    cost = InstanceCost.build(m, dev, devices, eff or Efficiency())
    kv = kv_bytes_per_token(m)
    lengths = np.arange(1, m.max_context + 1, dtype=np.float64)
    t_x = transfer_time(ln, lengths * kv)
    t_r = recompute_time(cost, lengths)
    ref = float(min(REFERENCE_PREFIX, m.max_context))
    tx_ref = float(transfer_time(ln, ref * kv))
    tr_ref = float(recompute_time(cost, ref))
    hidden_until = float("nan")
    if streaming == "layerwise":
        hide = suffix_prefill_time(cost, suffix_tokens, lengths)
        hidden = np.flatnonzero(t_x <= hide)
        hidden_until = float(lengths[hidden[-1]]) if hidden.size else 0.0
        t_x, t_r = np.maximum(t_x - hide, 0.0), np.maximum(t_r - hide, 0.0)
        hide_ref = float(suffix_prefill_time(cost, suffix_tokens, np.array([ref]))[0])
        tx_ref, tr_ref = max(tx_ref - hide_ref, 0.0), max(tr_ref - hide_ref, 0.0)
        # the moved prefix ties once it sticks out past the suffix prefill as far as the
        # recompute does (or, if the recompute hides, once it starts to stick out)
        budget = max(float(recompute_time(cost, ref)), hide_ref) - transfer_fixed(ln)
    elif streaming == "after_prefill":
        # bandwidth at which moving the reference prefix costs as much as recomputing it
        budget = tr_ref - transfer_fixed(ln)
    else:
        raise ValueError(f"unknown streaming mode {streaming!r}")
    recompute_better = t_r < t_x
    # per NIC, line rate (the catalog's figure): η of it is what a transfer reaches
    tie_bw = ref * kv / budget / 1e9 / k / one.efficiency if budget > 0 else float("nan")
    wins = np.flatnonzero(recompute_better)
    return {
        "model": m.name,
        "accelerator": dev.name,
        "link": ln.name,
        "kv_bytes_per_token": kv,
        "transfer_us_per_token": kv / link_rate(ln) * 1e6,
        "recompute_us_per_token": cost.linear_flops / cost.flops_rate_prefill * 1e6,
        "transfer_ms_at_ref": tx_ref * 1e3,
        "recompute_ms_at_ref": tr_ref * 1e3,
        "link_gbytes_per_s": one.bandwidth_gbps,
        "nics": k,
        "tie_bandwidth_gbytes_per_s": tie_bw,
        # first length where the cheaper option flips (NaN: one option wins at every length)
        "breakeven_prefix_tokens": float(np.flatnonzero(np.diff(recompute_better))[0] + 2)
        if np.any(np.diff(recompute_better))
        else float("nan"),
        "recompute_wins_from": float(lengths[wins[0]]) if wins.size else float("nan"),
        "recompute_wins_until": float(lengths[wins[-1]]) if wins.size else float("nan"),
        "winner_at_ref": "recompute_on_decode" if tr_ref < tx_ref else "transfer_per_request",
        "streaming": streaming,
        "hidden_until_prefix_tokens": hidden_until,
    }


def simulated_differences(agg: pl.DataFrame, systems: pl.DataFrame) -> pl.DataFrame:
    """Mean simulated TTFT of transfer minus recompute per model × decode accelerator × link
    actually simulated: ``systems`` maps each (model, workload, budget_factor) of ``agg`` to
    the accelerator and link its scenario ran on."""
    both = ["transfer_per_request", "recompute_on_decode"]
    key = ["model", "workload", "budget_factor"]
    piv = (
        agg.filter(pl.col("policy").is_in(both))
        .select(*key, "policy", "ttft_mean_ms")
        .pivot(on="policy", index=key, values="ttft_mean_ms")
    )
    if not set(both) <= set(piv.columns):
        return pl.DataFrame(
            schema={
                "model": pl.Utf8,
                "accelerator": pl.Utf8,
                "link": pl.Utf8,
                "sim_ttft_transfer_minus_recompute_ms": pl.Float64,
                "sim_scenarios": pl.Int64,
            }
        )
    return (
        piv.join(systems, on=key, how="inner")
        .with_columns((pl.col(both[0]) - pl.col(both[1])).alias("diff"))
        .group_by(["model", "accelerator", "link"])
        .agg(
            pl.col("diff").mean().alias("sim_ttft_transfer_minus_recompute_ms"),
            pl.len().cast(pl.Int64).alias("sim_scenarios"),
        )
    )


def crossover_table(
    models: list[str],
    accelerators: list[str],
    links: list[str],
    agg: pl.DataFrame | None = None,
    systems: pl.DataFrame | None = None,
    kv_dtype: str | None = None,
    streaming: str = "after_prefill",
) -> pl.DataFrame:
    """The analytic rows of every model × accelerator × link; the simulated TTFT difference
    only on the rows whose system was simulated (null elsewhere)."""
    df = pl.DataFrame(
        [
            analytic_row(m, a, k, kv_dtype=kv_dtype, streaming=streaming)
            for m in models
            for a in accelerators
            for k in links
        ]
    )
    keys = ["model", "accelerator", "link"]
    if agg is not None and agg.height and systems is not None and systems.height:
        sim = simulated_differences(agg, systems)
        df = df.join(sim, on=keys, how="left")
    else:
        df = df.with_columns(
            pl.lit(None, pl.Float64).alias("sim_ttft_transfer_minus_recompute_ms"),
            pl.lit(None, pl.Int64).alias("sim_scenarios"),
        )
    return df.sort(keys)


def simulated_systems(results: Path, agg: pl.DataFrame) -> pl.DataFrame | None:
    """(model, workload, budget_factor) → decode accelerator and link of the scenario each
    sweep point ran, from the grid the sweep recorded in ``results/sweep.json``."""
    import json

    from ..errors import PrefixbenchError
    from .grid import build_spec

    path = Path(results) / "sweep.json"
    try:
        spec = build_spec(json.loads(path.read_text()))
    except (OSError, ValueError, PrefixbenchError):
        return None
    rows, seen = [], set()
    for p in spec.points():
        k = (p.model, p.workload, p.budget_factor)
        if k in seen:
            continue
        seen.add(k)
        try:
            s = p.load()
        except PrefixbenchError:
            continue
        if s.cluster.link.bandwidth_gbps is not None:
            continue  # a custom bandwidth is not the catalog link of that name
        rows.append(
            {
                "model": catalog.get_model(s.model).name,
                "workload": s.name,
                "budget_factor": p.budget_factor,
                "accelerator": s.cluster.decode.accelerator,
                "link": s.cluster.link.name,
            }
        )
    if not rows:
        return None
    have = set(zip(agg["model"], agg["workload"], agg["budget_factor"], strict=True))
    df = pl.DataFrame(rows)
    return df.filter(
        pl.struct(["model", "workload", "budget_factor"]).map_elements(
            lambda r: (r["model"], r["workload"], r["budget_factor"]) in have,
            return_dtype=pl.Boolean,
        )
    )


def verdicts(table: pl.DataFrame, accelerator: str, link: str) -> list[str]:
    """One sentence per model for the given decode accelerator and link (a name that is not
    in the catalog, or not in the table, is an error, not a filter that matches nothing)."""
    from ..errors import CatalogError

    names = {}
    for kind, value, option, getter in (
        ("accelerator", accelerator, "--accelerator", catalog.get_accelerator),
        ("link", link, "--link", catalog.get_link),
    ):
        try:
            value = names[kind] = getter(value).name
        except CatalogError as e:
            raise CatalogError(e.what, where=option, fix=e.fix) from None
        if value not in table[kind].unique().to_list():
            raise CatalogError(
                f"{kind} '{value}' is not in the crossover table",
                where=option,
                fix=f"add it with --{kind}s {value}, or pick one of "
                + ", ".join(sorted(table[kind].unique().to_list())),
            )
    accelerator, link = names["accelerator"], names["link"]
    lines = []
    for model in table["model"].unique(maintain_order=True).sort():
        sub = table.filter(pl.col("model") == model)
        here = sub.filter((pl.col("accelerator") == accelerator) & (pl.col("link") == link))
        wins = sub.filter(pl.col("winner_at_ref") == "recompute_on_decode").height
        if here.height:
            r = here.row(0, named=True)
            if r["winner_at_ref"] == "transfer_per_request":
                head = (
                    f"{model} on {accelerator} over {link}: transfer a {REFERENCE_PREFIX}-token prefix "
                    f"({r['transfer_ms_at_ref']:.2f} ms) rather than recompute it ({r['recompute_ms_at_ref']:.2f} ms); "
                    f"recompute would only win on links slower than {r['tie_bandwidth_gbytes_per_s']:.2f} GB/s"
                )
            else:
                head = (
                    f"{model} on {accelerator} over {link}: recompute a {REFERENCE_PREFIX}-token prefix "
                    f"({r['recompute_ms_at_ref']:.2f} ms) rather than transfer it ({r['transfer_ms_at_ref']:.2f} ms); "
                    f"transfer wins on links faster than {r['tie_bandwidth_gbytes_per_s']:.2f} GB/s"
                )
        else:
            head = f"{model}"
        if here.height and here["streaming"][0] == "layerwise":
            head += (
                f" (layer-wise: times past the {REFERENCE_SUFFIX}-token suffix's prefill; the "
                f"transfer hides up to {here['hidden_until_prefix_tokens'][0]:,.0f} tokens)"
            )
        simtxt = ""
        if here.height and here["sim_ttft_transfer_minus_recompute_ms"][0] is not None:
            d = float(here["sim_ttft_transfer_minus_recompute_ms"][0])
            if d == d:
                simtxt = (
                    f"; simulated on {accelerator} over {link}, mean TTFT: transfer "
                    f"{'faster' if d < 0 else 'slower'} by {abs(d):.1f} ms"
                )
        lines.append(
            f"{head}{simtxt} (recompute wins in {wins} of {sub.height} accelerator×link pairs)"
        )
    return lines


DEFAULT_ACCELERATORS = ["l4", "a10g", "l40s", "a100-80gb", "h100-sxm"]
DEFAULT_ACCELERATOR = "l4"  # every command's default (scenario.models.InstanceGroup)
DEFAULT_LINK = "eth-25g"


def swept_hardware(results: Path) -> tuple[str, str] | None:
    """The decode accelerator and link the sweep in ``results`` ran on (its first grid
    point), so that the verdict prices that hardware; None without a recorded grid."""
    import json

    from ..errors import PrefixbenchError
    from .grid import build_spec

    try:
        spec = build_spec(json.loads((Path(results) / "sweep.json").read_text()))
        s = spec.points()[0].load()
    except (OSError, ValueError, PrefixbenchError, IndexError):
        return None
    return s.cluster.decode.accelerator, s.cluster.link.name


def run_crossover(
    results: Path,
    models: list[str] | None = None,
    accelerators: list[str] | None = None,
    links: list[str] | None = None,
    kv_dtype: str | None = None,
    streaming: str = "after_prefill",
    write: bool = True,
) -> tuple[pl.DataFrame, Path | None]:
    """Build crossover.parquet in ``results`` (with simulated TTFT differences if agg
    exists), the sweep's own decode accelerator among those priced; ``write=False``
    computes the table and leaves the folder alone."""
    accelerators_given = bool(accelerators)
    from prefixbench.io.artifacts import read_artifact, write_atomic

    agg_path = Path(results) / "agg.parquet"
    agg = read_artifact(agg_path, "agg") if agg_path.exists() else None
    if agg is not None:
        from .aggregate import one_admission

        agg = one_admission(agg)
    if not models:
        models = (
            sorted(agg["model"].unique().to_list())
            if agg is not None
            else ["qwen2-0.5b", "qwen2-1.5b"]
        )
    systems = simulated_systems(results, agg) if agg is not None else None
    swept = swept_hardware(results)
    accelerators = list(accelerators or DEFAULT_ACCELERATORS)
    if swept and swept[0] not in accelerators and not accelerators_given:
        accelerators.append(swept[0])
    table = crossover_table(
        models,
        accelerators,
        links or list(catalog.LINKS),
        agg,
        systems,
        kv_dtype=kv_dtype,
        streaming=streaming,
    )
    if not write:
        return table, None
    path = write_atomic(table, Path(results) / "crossover.parquet", "crossover")
    return table, path


def crossover_of(results: Path, write: bool = True) -> pl.DataFrame:
    """crossover.parquet of ``results``, computed (and, with ``write``, written) first when
    the sweep was not followed by `prefixbench crossover`: `plot` and `report` work right
    after `sweep`, and leave the folder alone when they write elsewhere."""
    from .results import load

    if (Path(results) / "crossover.parquet").is_file():
        return load(results, "crossover")
    return run_crossover(results, write=write)[0]
