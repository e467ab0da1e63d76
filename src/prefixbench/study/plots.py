"""`prefixbench plot`: the study's figures as PNGs (plotnine), read from the Parquet files only.

Every figure is built from a validated artifact (agg, crossover, recommendations), drawn at
150 dpi and written atomically (temp file in the output folder, then rename), so a reader
never sees half a PNG. The transfer/recompute curves are recomputed from the cost model
for a grid of prefix lengths (the crossover table holds only the figures at its reference
length).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from prefixbench.io.artifacts import read_artifact
from prefixbench.registry import POLICIES as REGISTRY_POLICIES
from prefixbench.scenario.models import POLICIES

from ..errors import ArtifactError
from .results import load

DPI = 150
BASE_SIZE = 11

# from the registry (prefixbench/registry/policies.py): Okabe-Ito colours, distinguishable
# with the common colour-vision deficiencies, and the short legend labels
POLICY_COLORS = {p.name: p.colour for p in REGISTRY_POLICIES}
SHORT = {p.name: p.legend for p in REGISTRY_POLICIES}
TIE_COLOR = "#bdbdbd"  # a decision-map cell whose margin's CI spans 0 (both maps)
DEFAULT_PAIR = ("l4", "eth-25g")  # the scenarios' default decode accelerator and link


def _pd(df: pl.DataFrame):
    """polars → pandas without pyarrow (plotnine wants pandas); Enum columns keep their order."""
    import pandas as pd

    frame = pd.DataFrame(df.to_dict(as_series=False))
    for col, dtype in df.schema.items():
        if dtype.is_float():  # an all-null column (one seed: no CI) must stay numeric
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
        elif isinstance(dtype, pl.Enum):
            frame[col] = pd.Categorical(frame[col], categories=list(dtype.categories), ordered=True)
    return frame


def _budget_label(b: float) -> str:
    return f"{b:g}"


def _with_labels(agg: pl.DataFrame) -> pl.DataFrame:
    """Ordered categorical labels for policies, budgets and facets."""
    policies = [p for p in POLICIES if p in set(agg["policy"])] + sorted(
        set(agg["policy"]) - set(POLICIES)
    )
    budgets = sorted(set(agg["budget_factor"]))
    return agg.with_columns(
        pl.col("policy").cast(pl.Enum(policies)),
        pl.col("budget_factor")
        .map_elements(_budget_label, return_dtype=pl.Utf8)
        .cast(pl.Enum([_budget_label(b) for b in budgets]))
        .alias("budget"),
    )


def _with_labels_like(df: pl.DataFrame, every: pl.DataFrame) -> pl.DataFrame:
    """``_with_labels`` of ``df`` with the categories of ``every`` (so that stable and
    unstable rows share one axis and one legend)."""
    if df.height == 0:
        return _with_labels(every).head(0)
    policies = [p for p in POLICIES if p in set(every["policy"])] + sorted(
        set(every["policy"]) - set(POLICIES)
    )
    budgets = sorted(set(every["budget_factor"]))
    return df.with_columns(
        pl.col("policy").cast(pl.Enum(policies)),
        pl.col("budget_factor")
        .map_elements(_budget_label, return_dtype=pl.Utf8)
        .cast(pl.Enum([_budget_label(b) for b in budgets]))
        .alias("budget"),
    )


def _unstable_layer(marks: pl.DataFrame, col: str, dodge):
    """× markers for unstable results (nothing when there are none)."""
    from plotnine import aes, geom_point

    if marks.height == 0:
        return []
    return geom_point(
        aes("budget", col, color="policy"), data=_pd(marks), shape="x", size=3.2,
        position=dodge, inherit_aes=False,
    )  # fmt: skip


def _policy_scales(kind: str = "fill"):
    from plotnine import scale_color_manual, scale_fill_manual

    scale = scale_fill_manual if kind == "fill" else scale_color_manual
    return scale(
        values=POLICY_COLORS, breaks=list(POLICY_COLORS), labels=list(POLICY_COLORS), name="policy"
    )


def _theme(legend: str = "bottom"):
    from plotnine import element_text, theme, theme_bw

    return theme_bw(base_size=BASE_SIZE) + theme(
        legend_position=legend,
        strip_text=element_text(size=BASE_SIZE - 1),
        plot_title=element_text(size=BASE_SIZE + 2, weight="bold"),
        plot_subtitle=element_text(size=BASE_SIZE - 1),
    )


def _facet_panels(df: pl.DataFrame) -> tuple[int, int]:
    """(rows, cols) of a model × workload grid."""
    return df["model"].n_unique(), df["workload"].n_unique()


def _size(
    rows: int, cols: int, w: float = 3.6, h: float = 2.7, extra_h: float = 1.6
) -> tuple[float, float]:
    return (max(7.0, 1.2 + w * cols), max(4.5, extra_h + h * rows))


def _save(plot, path: Path, size: tuple[float, float], dpi: int = DPI) -> Path:
    """Draw at ``dpi`` into a temp file next to ``path``, then rename into place."""
    import warnings

    from prefixbench.io.artifacts import _UMASK

    tmp = None
    try:
        # the writer's pid in the name: the next plot removes a killed writer's temp at once
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=".png", dir=path.parent
        )
        os.close(fd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plotnine warns about saving/size and removed NaN rows
            plot.save(tmp, width=size[0], height=size[1], dpi=dpi, format="png", verbose=False)
        os.chmod(tmp, 0o666 & ~_UMASK)  # the same mode as the Parquet files (mkstemp: 0600)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise ArtifactError(
            f"cannot write the figure ({e.strerror or e.__class__.__name__})",
            where=str(path),
            fix="free some disk space or choose another --out; earlier figures are unchanged",
        ) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------- figures


def split_stable(agg: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stable rows, unstable rows): unstable results are drawn as unstable, never dropped."""
    if "stable" not in agg.columns:
        return agg, agg.head(0)
    return agg.filter(pl.col("stable")), agg.filter(~pl.col("stable"))


def unstable_marks(stable: pl.DataFrame, unstable: pl.DataFrame, col: str) -> pl.DataFrame:
    """Unstable rows placed above their panel's stable values (an unstable run has no
    steady value to plot): y = 1.5 × the panel's largest stable ``col`` (1.0 if none)."""
    top = stable.group_by(["model", "workload"]).agg((pl.col(col).max() * 1.5).alias("_top"))
    out = unstable.join(top, on=["model", "workload"], how="left")
    return out.with_columns(pl.col("_top").fill_null(1.0).alias(col)).drop("_top")


def plot_mean_ttft(agg: pl.DataFrame):
    """01: mean TTFT per policy with 95% CI, facets model × workload, x budget factor.

    Points with CI bars on a log axis: recompute is often several times slower than the
    rest, and on a linear axis it would flatten the differences between the others."""
    from plotnine import (
        aes,
        facet_wrap,
        geom_errorbar,
        geom_point,
        ggplot,
        labs,
        position_dodge,
        scale_y_log10,
    )

    stable, unstable = split_stable(agg)
    marks = _with_labels_like(unstable_marks(stable, unstable, "ttft_mean_ms"), agg)
    df = _with_labels_like(stable, agg).with_columns(
        (pl.col("ttft_mean_ms") - pl.col("ttft_mean_ms_ci95"))
        .clip(lower_bound=pl.col("ttft_mean_ms") * 0.05)
        .alias("lo"),
        (pl.col("ttft_mean_ms") + pl.col("ttft_mean_ms_ci95")).alias("hi"),
    )
    dodge = position_dodge(width=0.7)
    rows, cols = _facet_panels(agg)
    p = (
        ggplot(_pd(df), aes("budget", "ttft_mean_ms", color="policy"))
        + geom_errorbar(aes(ymin="lo", ymax="hi"), position=dodge, width=0.35, size=0.5, na_rm=True)
        + geom_point(position=dodge, size=2.6)
        + _unstable_layer(marks, "ttft_mean_ms", dodge)
        + facet_wrap(["model", "workload"], ncol=cols, scales="free_y", labeller="label_both")
        + scale_y_log10()
        + _policy_scales("color")
        + labs(
            x="decode KV budget factor (1.0 = relaxed, 0.35 = at the cliff)",
            y="mean TTFT (ms, log scale)",
            title="Mean time to first token by policy",
            subtitle="points: mean over seeds; bars: 95% confidence interval "
            "(Student t over seeds); ×: unstable (no steady state, drawn above the panel)"
            "\nlog scale so the close policies stay apart; y scales differ per panel",
        )
        + _theme()
    )
    return p, _size(rows, cols)


def ttft_change_vs_transfer(agg: pl.DataFrame) -> pl.DataFrame:
    """Per scenario and policy: mean TTFT relative to transfer_per_request (negative = faster)."""
    base = agg.filter(pl.col("policy") == "transfer_per_request").select(
        "model", "workload", "budget_factor", pl.col("ttft_mean_ms").alias("transfer_ttft_ms")
    )
    return agg.join(base, on=["model", "workload", "budget_factor"], how="inner").with_columns(
        (pl.col("ttft_mean_ms") / pl.col("transfer_ttft_ms") - 1).alias("ttft_change")
    )


def plot_replica_memory(agg: pl.DataFrame):
    """03: replica KV held vs TTFT reduction relative to transfer_per_request."""
    from plotnine import (
        aes,
        facet_wrap,
        geom_hline,
        geom_path,
        geom_point,
        ggplot,
        guide_legend,
        guides,
        labs,
        scale_y_continuous,
    )

    df = ttft_change_vs_transfer(agg).filter(pl.col("policy").str.starts_with("replicate"))
    if df.height == 0:
        return None, None
    df = (
        _with_labels(df)
        .with_columns(
            (-pl.col("ttft_change") * 100).alias("reduction_pct"),
            (pl.col("mean_replica_kv_gb") * 1000).alias("replica_mb"),
            (pl.col("workload") + "/" + pl.col("policy").cast(pl.Utf8)).alias("line"),
        )
        .sort(["model", "workload", "policy", "budget_factor"])
    )
    n_models = df["model"].n_unique()
    p = (
        ggplot(_pd(df), aes("replica_mb", "reduction_pct", color="workload"))
        + geom_hline(yintercept=0, color="#444444", size=0.6)
        + geom_path(aes(group="line", linetype="policy"), size=0.5, alpha=0.6)
        + geom_point(aes(shape="budget"), size=2.8, alpha=0.9)
        + facet_wrap("model", ncol=n_models, scales="free_x", labeller="label_both")
        + scale_y_continuous(labels=lambda ys: [f"{y:g}%" for y in ys])
        + guides(
            color=guide_legend(nrow=2),
            shape=guide_legend(title="budget factor", nrow=2),
            linetype=guide_legend(nrow=2),
        )
        + labs(
            x="mean replica KV resident on the decode node (MB)",
            y="mean TTFT reduction vs transfer_per_request",
            title="What replica memory buys",
            subtitle="replicate_hotset (solid) and replicate_all_lru (dashed), mean over seeds\n"
            "above 0% = faster than transferring every prefix",
        )
        + _theme()
    )
    return p, (max(8.0, 1.5 + 5.5 * n_models), 6.0)


def crossover_curves(
    crossover: pl.DataFrame, accelerator: str, link: str, n: int = 240
) -> pl.DataFrame:
    """Unqueued transfer and recompute time over a grid of prefix lengths per model."""
    from prefixbench.physics.costmodel import (
        Efficiency,
        InstanceCost,
        kv_bytes_per_token,
        recompute_time,
        transfer_time,
    )

    from .. import catalog
    from ..errors import CatalogError

    frames = []
    for row in crossover.filter(
        (pl.col("accelerator") == accelerator) & (pl.col("link") == link)
    ).iter_rows(named=True):
        try:
            m = catalog.get_model(row["model"])
            cost = InstanceCost.build(m, catalog.get_accelerator(accelerator), 1, Efficiency())
            ln = catalog.get_link(link)
            top = min(8192, m.max_context)
            lengths = np.linspace(0, top, n)
            t_x = transfer_time(ln, lengths * kv_bytes_per_token(m)) * 1e3
            t_r = recompute_time(cost, lengths) * 1e3
        except CatalogError:
            # a model known only from its config.json: the table's per-token slopes
            lengths = np.linspace(0, 8192, n)
            t_x = lengths * row["transfer_us_per_token"] / 1e3
            t_r = lengths * row["recompute_us_per_token"] / 1e3
        for option, t in (("transfer", t_x), ("recompute", t_r)):
            frames.append(
                pl.DataFrame(
                    {
                        "model": row["model"],
                        "option": option,
                        "prefix_tokens": lengths,
                        "time_ms": t,
                    }
                )
            )
    return pl.concat(frames) if frames else pl.DataFrame()


def _pair(crossover: pl.DataFrame) -> tuple[str, str]:
    pairs = set(zip(crossover["accelerator"], crossover["link"], strict=True))
    return DEFAULT_PAIR if DEFAULT_PAIR in pairs else sorted(pairs)[0]


def plot_crossover(crossover: pl.DataFrame):
    """04: transfer vs recompute time over prefix length on the default accelerator/link."""
    from plotnine import aes, facet_wrap, geom_line, geom_vline, ggplot, labs, scale_color_manual

    from .crossover import REFERENCE_PREFIX

    accelerator, link = _pair(crossover)
    curves = crossover_curves(crossover, accelerator, link)
    here = crossover.filter((pl.col("accelerator") == accelerator) & (pl.col("link") == link)).sort(
        "model"
    )
    n_models = here.height
    p = (
        ggplot(_pd(curves), aes("prefix_tokens", "time_ms", color="option"))
        + geom_line(size=1.1)
        + geom_vline(xintercept=REFERENCE_PREFIX, linetype="dotted", color="#555555")
        + facet_wrap("model", ncol=n_models, scales="free_y", labeller="label_both")
        + scale_color_manual(
            values={
                "transfer": POLICY_COLORS["transfer_per_request"],
                "recompute": POLICY_COLORS["recompute_on_decode"],
            },
            breaks=["transfer", "recompute"],
            name="decode node gets the prefix KV by",
        )
        + labs(
            x="prefix length (tokens)",
            y="time to make the prefix KV available (ms)",
            title=f"Transfer vs recompute on {accelerator} over {link}",
            subtitle="roofline cost model, no queueing\ndotted line: the reference prefix "
            f"({REFERENCE_PREFIX} tokens) the tie bandwidth is quoted at",
        )
        + _theme()
    )
    top = float(curves["time_ms"].max()) if curves.height else 1.0
    for r in here.iter_rows(named=True):
        sub = curves.filter(pl.col("model") == r["model"])
        ymax = float(sub["time_ms"].max()) if sub.height else top
        lines = [
            f"tie bandwidth at {REFERENCE_PREFIX} tok: {r['tie_bandwidth_gbytes_per_s']:.2f} GB/s",
            f"this link: {_link_bw(link):.3g} GB/s → {r['winner_at_ref']} wins",
        ]
        if r["breakeven_prefix_tokens"] == r["breakeven_prefix_tokens"]:  # not NaN
            lines.append(f"break-even: {r['breakeven_prefix_tokens']:.0f} tokens")
        sim = r["sim_ttft_transfer_minus_recompute_ms"]
        if sim is not None and not math.isnan(sim):
            lines.append(
                f"simulated TTFT: transfer {'faster' if sim < 0 else 'slower'} by {abs(sim):.1f} ms"
            )
        p += _panel_text(r["model"], ymax, "\n".join(lines))
    return p, (max(8.0, 1.5 + 5.5 * n_models), 5.2)


def _panel_text(model: str, ymax: float, text: str):
    """A text layer placed in one model's panel only (plotnine facets by the data's column)."""
    import pandas as pd
    from plotnine import aes, geom_label

    data = pd.DataFrame(
        {"model": [model], "prefix_tokens": [0.0], "time_ms": [ymax * 0.98], "label": [text]}
    )
    return geom_label(  # boxed, so the dotted reference line does not run through the text
        aes("prefix_tokens", "time_ms", label="label"),
        data=data,
        inherit_aes=False,
        ha="left",
        va="top",
        size=BASE_SIZE - 2,
        color="#222222",
        fill="white",
        label_size=0.3,
    )


def _link_bw(link: str) -> float:
    from .. import catalog

    return catalog.get_link(link).bandwidth_gbps


def _short(policy: str) -> str:
    return SHORT.get(policy, policy)


def plot_crossover_map(crossover: pl.DataFrame):
    """07: transfer ÷ recompute time at the reference prefix for every accelerator × link."""
    from mizani.bounds import squish
    from plotnine import (
        aes,
        element_text,
        facet_wrap,
        geom_text,
        geom_tile,
        ggplot,
        labs,
        scale_color_identity,
        scale_fill_gradient2,
        theme,
    )

    from .. import catalog
    from .crossover import REFERENCE_PREFIX

    links = sorted(
        set(crossover["link"]), key=lambda k: (_link_bw(k) if k in catalog.LINKS else 0, k)
    )
    accels = sorted(
        set(crossover["accelerator"]),
        key=lambda a: (catalog.ACCELERATORS[a].peak_tflops if a in catalog.ACCELERATORS else 0, a),
    )
    df = (
        crossover.with_columns(
            (pl.col("transfer_ms_at_ref") / pl.col("recompute_ms_at_ref")).alias("ratio"),
            pl.col("link").cast(pl.Enum(links)),
            pl.col("accelerator").cast(pl.Enum(accels)),
        )
        .with_columns(
            pl.col("ratio").log(2).alias("log2_ratio"),
            pl.col("ratio").map_elements(lambda r: f"{r:.2g}", return_dtype=pl.Utf8).alias("label"),
        )
        .with_columns(  # white text on the dark ends of the scale
            pl.when(pl.col("log2_ratio").abs() > 4)
            .then(pl.lit("white"))
            .otherwise(pl.lit("black"))
            .alias("ink")
        )
    )
    lim = 6.0  # ratios beyond 64× either way are all "decisive"; squish them to the ends
    n_models = df["model"].n_unique()
    p = (
        ggplot(_pd(df), aes("link", "accelerator", fill="log2_ratio"))
        + geom_tile(color="white", size=0.4)
        + geom_text(aes(label="label", color="ink"), size=BASE_SIZE - 3)
        + scale_color_identity()
        + facet_wrap("model", ncol=1, labeller="label_both")
        + scale_fill_gradient2(
            low="#0072B2",
            mid="#f7f7f7",
            high="#D55E00",
            midpoint=0,
            limits=(-lim, lim),
            oob=squish,
            breaks=[-6, -3, 0, 3, 6],
            labels=["≤ 1/64", "1/8", "1", "8", "≥ 64"],
            name="transfer ÷ recompute",
        )
        + labs(
            x="prefill→decode link (slowest left)",
            y="decode accelerator",
            title=f"Transfer ÷ recompute time for a {REFERENCE_PREFIX}-token prefix",
            subtitle="roofline, no queueing; cell label: the ratio; "
            "< 1 (blue): transfer is cheaper, > 1 (orange): "
            "recompute is cheaper",
        )
        + _theme("right")
        + theme(axis_text_x=element_text(rotation=30, ha="right"))
    )
    return p, (
        max(9.0, 2.5 + 0.95 * len(links)),
        max(4.5, 1.8 + 0.45 * len(accels) * n_models + 0.4 * n_models),
    )


def plot_recommendations(rec: pl.DataFrame):
    """05: recommended policy per workload × budget, one panel per model."""
    from plotnine import aes, element_blank, facet_wrap, geom_text, geom_tile, ggplot, labs, theme

    budgets = sorted(set(rec["budget_factor"]))
    df = rec.with_columns(
        pl.col("budget_factor")
        .map_elements(_budget_label, return_dtype=pl.Utf8)
        .cast(pl.Enum([_budget_label(b) for b in budgets]))
        .alias("budget"),
        pl.struct(["recommended", "runner_up", "margin_ms", "margin_ci95_ms", "seeds_agree"])
        .map_elements(_tile_label, return_dtype=pl.Utf8)
        .alias("label"),
        pl.col("workload").cast(pl.Enum(sorted(set(rec["workload"]), reverse=True))),
    )
    n_models = df["model"].n_unique()
    n_work = df["workload"].n_unique()
    p = (
        ggplot(_pd(df), aes("budget", "workload", fill="recommended"))
        + geom_tile(color="white", size=1.0)
        + geom_text(aes(label="label"), size=BASE_SIZE - 2, lineheight=1.1)
        + facet_wrap("model", ncol=n_models, labeller="label_both")
        + _policy_scales("fill")
        + labs(
            x="decode KV budget factor",
            y="workload",
            title=f"Recommended policy ({', '.join(sorted(set(rec['objective'])))} objective)",
            subtitle="label: policy; runner-up TTFT − recommended TTFT (mean ± 95% CI over seeds)\n"
            "* = seeds disagree; a negative margin: the runner-up is faster but costs more\n"
            "replica memory or rejects more requests",
        )
        + _theme()
        + theme(panel_grid=element_blank())
    )
    return p, (max(8.0, 2.5 + 4.8 * n_models), max(4.5, 2.4 + 1.0 * n_work))


def _tile_label(r: dict) -> str:
    if r["recommended"] is None:
        return "none:\nunstable"
    name = r["recommended"] + ("" if r["seeds_agree"] else " *")
    m, ci = r["margin_ms"], r["margin_ci95_ms"]
    if m is None or math.isnan(m):
        return name
    vs = f"\nvs {r['runner_up']}" if r["runner_up"] else ""
    if ci is None or math.isnan(ci):
        return f"{name}\n{m:+.1f} ms{vs}"
    return f"{name}\n{m:+.1f} ± {ci:.1f} ms{vs}"


def plot_ttft_distribution(agg: pl.DataFrame):
    """06: TTFT p50 / p90 / p99 per policy (means over seeds), log scale."""
    from plotnine import (
        aes,
        facet_wrap,
        geom_linerange,
        geom_point,
        ggplot,
        guide_legend,
        guides,
        labs,
        position_dodge,
        scale_shape_manual,
        scale_y_log10,
    )

    stable, unstable = split_stable(agg)
    marks = _with_labels_like(unstable_marks(stable, unstable, "ttft_p99_ms"), agg)
    df = _with_labels_like(stable, agg)
    long = (
        df.select(
            "model", "workload", "budget", "policy", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"
        )
        .unpivot(
            index=["model", "workload", "budget", "policy"],
            variable_name="quantile",
            value_name="ttft_ms",
        )
        .with_columns(
            pl.col("quantile")
            .str.replace("ttft_", "")
            .str.replace("_ms", "")
            .cast(pl.Enum(["p50", "p90", "p99"]))
        )
        .filter(pl.col("ttft_ms") > 0)
    )
    dodge = position_dodge(width=0.8)
    rows, cols = _facet_panels(agg)
    p = (
        ggplot(_pd(df.filter(pl.col("ttft_p50_ms") > 0)), aes("budget", color="policy"))
        + _unstable_layer(marks, "ttft_p99_ms", dodge)
        + geom_linerange(aes(ymin="ttft_p50_ms", ymax="ttft_p99_ms"), position=dodge, size=0.8)
        + geom_point(
            aes(y="ttft_ms", shape="quantile", group="policy"),
            data=_pd(long),
            position=dodge,
            size=1.9,
        )
        + facet_wrap(["model", "workload"], ncol=cols, scales="free_y", labeller="label_both")
        + scale_y_log10()
        + scale_shape_manual(values={"p50": "o", "p90": "^", "p99": "s"}, name="TTFT quantile")
        + _policy_scales("color")
        + guides(color=guide_legend(nrow=2))
        + labs(
            x="decode KV budget factor",
            y="TTFT (ms, log scale)",
            title="TTFT distribution by policy",
            subtitle="p50 (circle), p90 (triangle), p99 (square) of steady-state requests\n"
            "mean over seeds",
        )
        + _theme()
    )
    return p, _size(rows, cols)


def tile_edges(
    values: list[float], log: bool, single: float = 1.0
) -> tuple[list[float], list[float]]:
    """Tile edges of a decision map's axis: midpoints between neighbouring grid values
    (geometric on a log axis), so tiles abut; ``single`` is the width of a lone value's tile
    (in log units on a log axis). Used by figure 08 and by `prefixbench map`."""
    v = np.log(values) if log else np.asarray(values, dtype=float)
    step = np.diff(v)
    first = step[0] if len(step) else single
    last = step[-1] if len(step) else single
    mids = np.concatenate(([v[0] - first / 2], (v[:-1] + v[1:]) / 2, [v[-1] + last / 2]))
    e = np.exp(mids) if log else mids
    return e[:-1].tolist(), e[1:].tolist()


def decision_tiles(dec: pl.DataFrame) -> pl.DataFrame:
    """One rectangle per (budget, link): x spans the midpoints between neighbouring links'
    log10 bandwidths, y the budget's row; alpha grows with margin ÷ CI (ties are grey)."""
    bws = sorted(set(dec["link_gbytes_per_s"]))
    lo_e, hi_e = tile_edges([math.log10(b) for b in bws], log=False, single=0.6)
    lo, hi = dict(zip(bws, lo_e, strict=True)), dict(zip(bws, hi_e, strict=True))
    budgets = sorted(set(dec["budget_factor"]))
    row = {b: i for i, b in enumerate(budgets)}
    return dec.with_columns(
        pl.col("link_gbytes_per_s").replace_strict(lo, return_dtype=pl.Float64).alias("xmin"),
        pl.col("link_gbytes_per_s").replace_strict(hi, return_dtype=pl.Float64).alias("xmax"),
        (pl.col("budget_factor").replace_strict(row, return_dtype=pl.Float64) - 0.5).alias("ymin"),
        (pl.col("budget_factor").replace_strict(row, return_dtype=pl.Float64) + 0.5).alias("ymax"),
        pl.col("link_gbytes_per_s").log10().alias("x"),
        pl.col("budget_factor").replace_strict(row, return_dtype=pl.Float64).alias("y"),
        pl.when(pl.col("decision") == "tie")
        .then(1.0)
        .otherwise(0.35 + 0.65 * (pl.col("strength").fill_nan(1.0).fill_null(1.0).clip(0, 3) / 3))
        .alias("shade"),
        pl.struct(["margin_ms", "margin_ci95_ms"])
        .map_elements(
            lambda r: (
                ""
                if r["margin_ms"] is None or r["margin_ms"] != r["margin_ms"]
                else (
                    f"{r['margin_ms']:+.1f}"
                    + (
                        f"\n±{r['margin_ci95_ms']:.1f}"
                        if r["margin_ci95_ms"] == r["margin_ci95_ms"]
                        and r["margin_ci95_ms"] is not None
                        else ""
                    )
                )
            ),
            return_dtype=pl.Utf8,
        )
        .alias("label"),
        (pl.col("model") + " on " + pl.col("accelerator")).alias("system"),
    )


def plot_decision_map(dec: pl.DataFrame):
    """08: the winning policy over decode KV budget × link bandwidth (log axis), per model ×
    accelerator and workload; grey where the margin's CI spans 0 (a tie)."""
    from plotnine import (
        aes,
        element_blank,
        facet_grid,
        geom_rect,
        geom_text,
        ggplot,
        guide_legend,
        guides,
        labs,
        scale_alpha_identity,
        scale_fill_manual,
        scale_x_continuous,
        scale_y_continuous,
        theme,
    )

    df = decision_tiles(dec)
    bws = sorted(set(dec["link_gbytes_per_s"]))
    names = {
        r["link_gbytes_per_s"]: r["link"]
        for r in dec.select("link", "link_gbytes_per_s").unique().to_dicts()
    }
    budgets = sorted(set(dec["budget_factor"]))
    colors = {**POLICY_COLORS, "tie": TIE_COLOR}
    present = [k for k in colors if k in set(df["decision"])]
    n_sys, n_work = df["system"].n_unique(), df["workload"].n_unique()
    p = (
        ggplot(_pd(df))
        + geom_rect(
            aes(xmin="xmin", xmax="xmax", ymin="ymin", ymax="ymax", fill="decision", alpha="shade"),
            color="white",
            size=0.6,
        )
        + geom_text(
            aes("x", "y", label="label"), size=BASE_SIZE - 4, color="#1a1a1a", lineheight=0.9
        )
        + facet_grid("workload ~ system")
        + scale_fill_manual(values=colors, breaks=present, name="winner (mean TTFT)")
        + scale_alpha_identity()
        + scale_x_continuous(
            breaks=[math.log10(b) for b in bws],
            labels=[f"{b:g}\n{names[b]}" for b in bws],
            expand=(0, 0),
        )
        + scale_y_continuous(
            breaks=list(range(len(budgets))), labels=[f"{b:g}" for b in budgets], expand=(0, 0)
        )
        + guides(fill=guide_legend(nrow=2))
        + labs(
            x="prefill→decode link bandwidth per channel (GB/s, log scale)",
            y="decode KV budget factor",
            title="Which policy wins: budget × link bandwidth",
            subtitle="winner: lowest mean TTFT among the policies that do not reject more\n"
            "label: runner-up − winner mean TTFT (ms) ± 95% CI over seeds; "
            "grey: a tie (the CI spans 0)\n"
            "paler: the margin clears fewer CI half-widths; negative: the runner-up is "
            "faster but rejects more",
        )
        + _theme()
        + theme(panel_grid=element_blank())
    )
    return p, (max(8.0, 2.5 + 4.6 * n_sys), max(4.5, 2.6 + 2.3 * n_work))


def ttft_cdf_frame(events: pl.DataFrame, n: int = 200, col: str = "ttft_ms") -> pl.DataFrame:
    """Empirical CDF of ``col`` (TTFT by default) per model × workload × budget × policy
    with the completed steady-state requests of every seed pooled (not percentiles
    averaged over seeds); the values are returned in column ``ttft_ms`` / ``col``."""
    done = events.filter(~pl.col("warmup") & (pl.col("outcome") == "completed"))
    keys = ["model", "workload", "budget_factor", "policy"]
    qs = np.linspace(0.0, 1.0, n)
    frames = []
    for key, grp in done.group_by(keys, maintain_order=True):
        vals = np.sort(grp[col].drop_nulls().drop_nans().to_numpy())
        if vals.size == 0:
            continue
        frames.append(
            pl.DataFrame(
                {
                    **{k: [v] * n for k, v in zip(keys, key, strict=True)},
                    col: np.quantile(vals, qs),
                    "cdf": qs,
                    "requests": [int(vals.size)] * n,
                    "seeds": [int(grp["seed"].n_unique())] * n,
                }
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame()


CDF_METRICS = {
    "ttft_ms": ("TTFT", "TTFT (ms, log scale)"),
    "tpot_ms": ("TPOT", "TPOT (ms, log scale)"),
}


def plot_ttft_cdf(events: pl.DataFrame, col: str = "ttft_ms"):
    """09/13: TTFT (or TPOT) CDF per policy, requests pooled over seeds, facets scenario ×
    budget. ITL has no CDF: the engine does not record per-token gaps."""
    from plotnine import (
        aes,
        facet_grid,
        geom_step,
        ggplot,
        label_both,
        labeller,
        labs,
        scale_x_log10,
    )

    name, axis = CDF_METRICS[col]
    cdf = ttft_cdf_frame(events, col=col)
    if cdf.height == 0:
        return None, None
    df = _with_labels(cdf.with_columns(pl.col("model")))
    df = df.with_columns((pl.col("model") + " / " + pl.col("workload")).alias("scenario"))
    seeds = int(cdf["seeds"].max())
    p = (
        ggplot(_pd(df), aes(col, "cdf", color="policy"))
        + geom_step(size=0.8)
        + facet_grid("budget ~ scenario", labeller=labeller(rows=label_both))
        + scale_x_log10()
        + _policy_scales("color")
        + labs(
            x=axis,
            y="fraction of completed requests",
            title=f"{name} distribution by policy",
            subtitle=f"steady-state completed requests pooled over {seeds} seed(s) "
            "(not per-seed percentiles averaged)",
        )
        + _theme()
    )
    rows, cols = df["budget"].n_unique(), df["scenario"].n_unique()
    return p, _size(rows, cols, w=4.4)


def _events(results: Path) -> pl.DataFrame | None:
    """Per-request tables of a sweep run with --events (events/*.parquet), or None."""
    files = sorted((Path(results) / "events").glob("*.parquet"))
    if not files:
        return None
    frames = [read_artifact(f, "requests") for f in files]
    need = ["model", "workload", "budget_factor", "seed", "policy", "warmup", "outcome", "ttft_ms"]
    need += ["tpot_ms"]
    frames = [f.select(need) for f in frames if set(need) <= set(f.columns)]
    return pl.concat(frames, how="vertical_relaxed") if frames else None


def regret_frame(agg: pl.DataFrame) -> pl.DataFrame:
    """Per scenario and policy: mean TTFT minus the best policy's (ms, ≥ 0) and relative."""
    keys = ["model", "workload", "budget_factor"]
    best = agg.group_by(keys).agg(pl.col("ttft_mean_ms").min().alias("best_ms"))
    return agg.join(best, on=keys).with_columns(
        (pl.col("ttft_mean_ms") - pl.col("best_ms")).alias("regret_ms"),
        (pl.col("ttft_mean_ms") / pl.col("best_ms") - 1).alias("regret_rel"),
    )


def plot_regret(agg: pl.DataFrame):
    """10: each policy's mean-TTFT cost against the best policy of its scenario."""
    from mizani.bounds import squish
    from plotnine import (
        aes,
        element_blank,
        facet_wrap,
        geom_text,
        geom_tile,
        ggplot,
        labs,
        scale_fill_gradient,
        theme,
    )

    stable, unstable = split_stable(agg)
    frame = regret_frame(stable)
    if unstable.height:  # drawn as grey tiles labelled unstable, never left out
        bad = unstable.select("model", "workload", "budget_factor", "policy")
        frame = pl.concat([frame, bad], how="diagonal_relaxed")
    df = _with_labels_like(frame, agg).with_columns(
        pl.col("policy")
        .cast(pl.Utf8)
        .cast(pl.Enum(list(reversed(agg["policy"].unique(maintain_order=True).to_list())))),
        pl.struct(["regret_ms", "regret_rel"])
        .map_elements(
            lambda r: (
                "unstable"
                if r["regret_ms"] is None
                else "best"
                if r["regret_ms"] == 0
                else f"+{r['regret_ms']:.1f} ms\n+{r['regret_rel']:.0%}"
            ),
            return_dtype=pl.Utf8,
        )
        .alias("label"),
        (pl.col("regret_rel") * 100).alias("regret_pct"),
    )
    rows, cols = _facet_panels(df)
    p = (
        ggplot(_pd(df), aes("budget", "policy", fill="regret_pct"))
        + geom_tile(color="white", size=0.8)
        + geom_text(aes(label="label"), size=BASE_SIZE - 4, lineheight=0.95)
        + facet_wrap(["model", "workload"], ncol=cols, labeller="label_both")
        + scale_fill_gradient(
            low="#f7f7f7", high="#D55E00", limits=(0, 100), oob=squish,
            name="TTFT over best (%)", na_value="#bdbdbd",
        )  # fmt: skip
        + labs(
            x="decode KV budget factor",
            y="policy",
            title="Regret: what each policy costs against the best one",
            subtitle="mean TTFT minus the lowest stable mean TTFT of the scenario (mean over "
            "seeds); colour saturates at +100%; grey: unstable",
        )
        + _theme()
        + theme(panel_grid=element_blank())
    )
    return p, _size(rows, cols, w=4.2, h=2.6)


def breakeven_frame(models: list[str], accelerators: list[str], n: int = 60) -> pl.DataFrame:
    """Prefix lengths over which recompute beats transfer, against link bandwidth (roofline,
    no queueing, latency of 20 µs), per model and decode accelerator."""
    from prefixbench.physics.costmodel import (
        Efficiency,
        InstanceCost,
        kv_bytes_per_token,
        recompute_time,
        transfer_time,
    )

    from .. import catalog
    from ..catalog.specs import LinkSpec

    frames = []
    for name in models:
        m = catalog.get_model(name)
        kv = kv_bytes_per_token(m)
        lengths = np.unique(np.geomspace(1, m.max_context, 400).astype(np.int64)).astype(float)
        for acc in accelerators:
            cost = InstanceCost.build(m, catalog.get_accelerator(acc), 1, Efficiency())
            t_r = recompute_time(cost, lengths)
            for bw in np.geomspace(0.1, 1000.0, n):
                link = LinkSpec(name="x", kind="ethernet", bandwidth_gbps=bw, latency_us=20.0)
                wins = np.flatnonzero(t_r < transfer_time(link, lengths * kv))
                frames.append(
                    {
                        "model": m.name,
                        "accelerator": acc,
                        "gbytes_per_s": float(bw),
                        "recompute_from": float(lengths[wins[0]]) if wins.size else math.nan,
                        "recompute_until": float(lengths[wins[-1]]) if wins.size else math.nan,
                    }
                )
    return pl.DataFrame(frames)


def plot_breakeven(crossover: pl.DataFrame):
    """11: the longest prefix recompute still beats transfer for, over link bandwidth."""
    from plotnine import (
        aes,
        facet_wrap,
        geom_line,
        geom_ribbon,
        geom_vline,
        ggplot,
        labs,
        scale_x_log10,
        scale_y_log10,
    )

    from .. import catalog

    models = sorted(set(crossover["model"]) & set(catalog.MODELS))
    accels = [a for a in sorted(set(crossover["accelerator"])) if a in catalog.ACCELERATORS]
    if not models or not accels:
        return None, None
    df = breakeven_frame(models, accels).drop_nans()
    links = sorted(
        {(k, catalog.get_link(k).bandwidth_gbps) for k in crossover["link"] if k in catalog.LINKS},
        key=lambda x: x[1],
    )
    p = (
        ggplot(_pd(df), aes("gbytes_per_s", color="accelerator", fill="accelerator"))
        + geom_ribbon(aes(ymin="recompute_from", ymax="recompute_until"), alpha=0.12, size=0)
        + geom_line(aes(y="recompute_until"), size=1.0)
        + geom_vline(
            xintercept=[bw for _, bw in links], linetype="dotted", color="#999999", size=0.3
        )
        + facet_wrap("model", ncol=len(models), labeller="label_both")
        + scale_x_log10()
        + scale_y_log10()
        + labs(
            x="link bandwidth per channel (GB/s, log scale); dotted: the catalog links",
            y="prefix length (tokens, log scale)",
            title="Break-even prefix length against link bandwidth",
            subtitle="shaded: prefix lengths for which recomputing on the decode node is "
            "cheaper than transferring the KV;\nline: the longest such prefix (above it, "
            "transfer wins); roofline, no queueing, 20 µs link latency",
        )
        + _theme()
    )
    return p, (max(8.0, 1.5 + 5.5 * len(models)), 5.6)


def plot_goodput(cap: pl.DataFrame):
    """12: goodput against offered rate from `capacity --out`, one line per policy."""
    from plotnine import (
        aes,
        facet_wrap,
        geom_abline,
        geom_line,
        geom_point,
        geom_vline,
        ggplot,
        labs,
    )

    df = _with_policies(cap)
    best = df.group_by(["scenario", "policy"]).agg(pl.col("max_rate_rps").first())
    n = df["scenario"].n_unique()
    target = sorted(set(cap["target"]))
    p = (
        ggplot(_pd(df), aes("rate", "goodput_rps", color="policy"))
        + geom_abline(slope=1, intercept=0, linetype="dashed", color="#999999")
        + geom_line(size=0.8)
        + geom_point(size=2.2)
        + geom_vline(
            aes(xintercept="max_rate_rps", color="policy"),
            data=_pd(_with_policies(best)),
            linetype="dotted",
            size=0.7,
        )
        + facet_wrap("scenario", ncol=min(n, 3), scales="free", labeller="label_both")
        + _policy_scales("color")
        + labs(
            x="offered rate (req/s)",
            y="goodput (req/s meeting the TTFT and TPOT SLOs)",
            title="Goodput against offered rate",
            subtitle="points: the capacity search's probes; dashed: goodput = offered rate\n"
            f"dotted: the highest rate holding {', '.join(f'{t:.0%}' for t in target)} "
            "SLO attainment",
        )
        + _theme()
    )
    return p, (max(8.0, 1.5 + 5.0 * min(n, 3)), 5.4 + 3.0 * ((n - 1) // 3))


def _with_policies(df: pl.DataFrame) -> pl.DataFrame:
    pols = [p for p in POLICIES if p in set(df["policy"])] + sorted(
        set(df["policy"]) - set(POLICIES)
    )
    return df.with_columns(pl.col("policy").cast(pl.Enum(pols)))


# ---------------------------------------------------------------- entry point


def render_plots(results: Path, out: Path) -> list[Path]:
    """Write the study's PNGs from ``results`` into ``out``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never open a window or need a display

    from . import capacity_table as _capacity  # noqa: F401 - registers the capacity artifact
    from . import decision as _decision  # noqa: F401 - registers the decision artifact
    from .recommend import recommendations

    results, out = Path(results), Path(out)

    def optional(kind: str) -> pl.DataFrame | None:
        path = results / f"{kind}.parquet"
        return read_artifact(path, kind) if path.is_file() else None

    decision, capacity = optional("decision"), optional("capacity")
    figures: list[tuple[str, Callable[[], tuple]]] = []
    agg = None
    # a link sweep or a capacity search alone has no agg: draw just its figure
    if (decision is None and capacity is None) or (results / "agg.parquet").is_file():
        agg = load(results, "agg")
        from .crossover import crossover_of

        crossover = crossover_of(results, write=False)
        from .aggregate import one_admission

        rec = one_admission(recommendations(results, agg, write=False))
        every = one_admission(agg)  # one admission mode per figure (paged first)
        # an unstable point is not a result (docs/model.md): 01, 06 and 10 draw it as
        # unstable; the other figures show stable points only
        agg = every.filter(pl.col("stable"))
        events = _events(results)
        figures += [
            ("01_mean_ttft_by_policy.png", lambda: plot_mean_ttft(every)),
            ("03_replica_memory_tradeoff.png", lambda: plot_replica_memory(agg)),
            ("04_transfer_recompute_crossover.png", lambda: plot_crossover(crossover)),
            ("05_recommendation_matrix.png", lambda: plot_recommendations(rec)),
            ("06_ttft_distribution.png", lambda: plot_ttft_distribution(every)),
            ("07_crossover_map.png", lambda: plot_crossover_map(crossover)),
            ("10_regret.png", lambda: plot_regret(every)),
            ("11_breakeven_prefix.png", lambda: plot_breakeven(crossover)),
        ]
        if events is not None and events.height:
            figures.append(("09_ttft_cdf.png", lambda: plot_ttft_cdf(events)))
            figures.append(("13_tpot_cdf.png", lambda: plot_ttft_cdf(events, "tpot_ms")))
    if decision is not None and decision.height:
        figures.append(("08_decision_map.png", lambda: plot_decision_map(decision)))
    if capacity is not None and capacity.height:
        figures.append(("12_goodput_vs_rate.png", lambda: plot_goodput(capacity)))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(
            f"cannot create the plots folder ({e.strerror})", where=str(out)
        ) from None
    _remove_stale_temps(out)
    written = []
    from .backends import sigterm_as_interrupt

    with sigterm_as_interrupt():  # a SIGTERM unwinds through _save, which removes its temp
        for name, build in figures:
            if agg is not None and agg.height == 0 and name[:2] in ("01", "03", "06", "10"):
                continue  # every point is unstable: nothing steady to draw
            plot, size = build()
            if plot is not None:
                written.append(_save(plot, out / name, size))
    return written


STALE_TEMP_S = 300.0  # a figure draws in seconds: an older temp PNG is a killed run's


def _writer_gone(tmp: Path) -> bool:
    """Whether the process that named ``tmp`` (``.NAME.png.PID.XXXX.png``) no longer runs."""
    pid = tmp.name.split(".png.", 1)[1].partition(".")[0] if ".png." in tmp.name else ""
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _remove_stale_temps(out: Path) -> None:
    """Remove the hidden temp PNGs (``.NAME.png.PID.XXXX.png``) a SIGKILLed plot left in
    ``out``: at once when their writer is gone, else once older than STALE_TEMP_S (a pid
    reused by another process, or a temp without one)."""
    import time

    now = time.time()
    for tmp in out.glob(".*.png.*.png"):
        with contextlib.suppress(OSError):
            if _writer_gone(tmp) or now - tmp.stat().st_mtime > STALE_TEMP_S:
                tmp.unlink()
