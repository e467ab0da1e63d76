"""The decision map drawn two ways: one character per cell for a terminal, a PNG (plotnine);
and the map's files (`write_map`).

Both read only the cells frame (kind ``decision_map``) and the spec it was made from.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from .decision_map import AXES, METRICS, MapResult
from .plots import POLICY_COLORS, TIE_COLOR, _pd, _save, tile_edges

LETTERS = {
    "transfer_per_request": "T",
    "recompute_on_decode": "R",
    "replicate_hotset": "H",
    "replicate_all_lru": "L",
    "replicate_tiered": "D",  # DRAM tier (T is taken)
}
TIE, UNSTABLE = "=", "!"
UNSTABLE_COLOR = "#3a3a3a"
MARGIN_CAP = 0.25  # relative margins at or above this are drawn fully opaque


def letter(policy: str) -> str:
    if policy in LETTERS:
        return LETTERS[policy]
    return policy[:1].upper()  # a policy added later: its initial


def cell_char(row: dict) -> str:
    if row["state"] == "unstable":
        return UNSTABLE
    if row["state"] == "tie":
        return TIE
    return letter(row["winner"])


# ---------------------------------------------------------------- text


def _wrap(items: list[str], width: int, head: str) -> list[str]:
    """Items two spaces apart, never split, continuation lines aligned under the first."""
    lines, cur = [], head
    for it in items:
        if len(cur) + len(it) + 2 > width and cur.strip():
            lines.append(cur.rstrip())
            cur = " " * len(head)
        cur += it + "  "
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


def _para(text: str, width: int, pad: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=" " * pad, subsequent_indent=" " * pad)


def _x_ticks(xs: list[float], fmt, pad: int) -> list[str]:
    """Tick labels under the first, middle and last column, positioned by column."""
    n = len(xs)
    marks = " " * pad + "".join("+" if i in (0, n // 2, n - 1) else "-" for i in range(n))
    line = [" "] * (pad + n + 12)
    for i in sorted({0, n // 2, n - 1}):
        text = fmt(xs[i])
        start = pad + i - (len(text) // 2 if i else 0)
        if i == n - 1:
            start = pad + i - len(text) + 1 if len(text) > 1 and n > 1 else pad + i
        start = max(pad, start)
        if all(c == " " for c in line[start - 1 : start + len(text) + 1]):
            line[start : start + len(text)] = text
    return [marks, "".join(line).rstrip()]


def _column_of(xs: list[float], value: float, log: bool) -> int | None:
    """The grid column nearest ``value`` (None when outside the grid)."""
    if value is None or not math.isfinite(value) or not xs[0] <= value <= xs[-1]:
        return None
    f = np.log if log else (lambda v: v)
    return int(np.argmin([abs(f(x) - f(value)) for x in xs]))


def text_map(result: MapResult, width: int = 80) -> str:
    """The map at ``width`` columns: rows are y (high at the top), one character per cell."""
    spec, cells = result.spec, result.cells
    ax_x, ax_y = AXES[spec.x], AXES[spec.y]
    xs, ys = spec.xs(), spec.ys()
    grid = {(r["ix"], r["iy"]): r for r in cells.iter_rows(named=True)}
    labels = [ax_y.fmt(y) for y in ys]
    pad = max(len(s) for s in labels) + 2
    metric = METRICS[spec.metric]
    lines = [
        f"{spec.model} · {spec.workload}: winner by {metric.label}",
        f"{spec.seeds} seeds × {spec.requests} requests per cell, {len(spec.policies)} policies",
        f"y: {ax_y.label}",
    ]
    be_by_row = [grid[(0, iy)]["breakeven_gbps"] for iy in range(len(ys))]
    be_by_col = [grid[(ix, 0)]["breakeven_gbps"] for ix in range(len(xs))]
    varies = spec.x == "bandwidth" and len({b for b in be_by_row if b is not None}) > 1
    # bandwidth on y: mark the row of the break-even, when it is one value for the whole map
    be_row = None
    if spec.y == "bandwidth" and len({b for b in be_by_col if b is not None}) == 1:
        be_row = _column_of(ys, be_by_col[0], ax_y.log)
    for iy in reversed(range(len(ys))):
        row = "".join(cell_char(grid[(ix, iy)]) for ix in range(len(xs)))
        tail = ""
        if varies and be_by_row[iy] is not None:
            tail = f"  break-even {be_by_row[iy]:.3g} GB/s"
        if be_row == iy:
            tail = f"  < break-even {be_by_col[0]:.3g} GB/s"
        lines.append(f"{labels[iy]:>{pad - 2}} |{row}{tail}")
    lines += _x_ticks(xs, ax_x.fmt, pad)
    scale = ", log scale" if ax_x.log else ""
    lines += _para(f"x: {ax_x.label}, {ax_x.fmt(xs[0])} to {ax_x.fmt(xs[-1])}{scale}", width, pad)
    be = be_by_row[0]
    if spec.x == "bandwidth" and not varies:
        col = _column_of(xs, be, ax_x.log)
        if col is not None:
            tag = f"break-even {be:.3g} GB/s"
            at = pad + col
            lines.append(
                " " * at + "^ " + tag
                if at + len(tag) + 2 <= width
                else " " * (at - len(tag) - 1) + tag + " ^"
            )
        lines += _para(_breakeven_words(spec, be), width, pad)
    elif spec.y == "bandwidth" and be_row is None:
        known = [b for b in be_by_col if b is not None]
        span = f"{min(known):.3g} to {max(known):.3g} GB/s along x" if known else "none"
        lines += _para(f"break-even {span} (the PNG draws it)", width, pad)
        lines += _para(_breakeven_words(spec, known[0] if known else None), width, pad)
    elif "bandwidth" in (spec.x, spec.y):
        lines += _para(_breakeven_words(spec, be), width, pad)
    items = [f"{letter(p)} {p}" for p in spec.policies]
    items += [f"{TIE} tie (95% CI of margin spans 0)", f"{UNSTABLE} unstable (no stable policy)"]
    lines += _wrap(items, width, "legend: ")
    counts = cells.group_by("state").len().sort("state")
    lines.append(
        "cells: " + ", ".join(f"{n} {s}" for s, n in counts.iter_rows()) + f" of {cells.height}"
    )
    pairs = tie_pairs(cells)
    if pairs:
        lines += _wrap(pairs, width, "ties: ")
    return "\n".join(lines)


def tie_pairs(cells: pl.DataFrame) -> list[str]:
    """The policies that tie, per pair, with how many cells: "A ≈ B (n cells)"."""
    ties = cells.filter(pl.col("state") == "tie")
    pairs: dict[tuple[str, str], int] = {}
    for r in ties.iter_rows(named=True):
        key = tuple(sorted((r["winner"], r["runner_up"])))
        pairs[key] = pairs.get(key, 0) + 1
    order = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
    return [f"{a} ≈ {b} ({n} cell{'s' if n != 1 else ''})" for (a, b), n in order]


def _breakeven_words(spec, be: float | None) -> str:
    if be is None:
        return "no analytic break-even here: recompute never beats the link latency alone"
    side = "right of" if spec.x == "bandwidth" else "above"
    what = "each cell's mean prefix's" if "prefix" in (spec.x, spec.y) else "the mean prefix's"
    return (
        f"break-even: the bandwidth at which moving {what} KV costs as much as recomputing "
        f"it on decode (unqueued, study/crossover.py); transfer is cheaper {side} it"
    )


# ---------------------------------------------------------------- PNG


def _frame(result: MapResult) -> pl.DataFrame:
    cells = result.cells
    kind = (
        pl.when(pl.col("state") == "unstable")
        .then(pl.lit("unstable"))
        .when(pl.col("state") == "tie")
        .then(pl.lit("tie"))
        .otherwise(pl.col("winner"))
    )
    shade = (
        pl.when(pl.col("state") == "win")
        .then(pl.col("rel_margin").fill_null(MARGIN_CAP).clip(0.0, MARGIN_CAP))
        .otherwise(MARGIN_CAP)
    )
    spec = result.spec
    x0, x1 = tile_edges(spec.xs(), AXES[spec.x].log)
    y0, y1 = tile_edges(spec.ys(), AXES[spec.y].log)
    return cells.with_columns(
        kind.alias("cell"),
        shade.alias("shade"),
        pl.col("ix").map_elements(lambda i: x0[i], return_dtype=pl.Float64).alias("xmin"),
        pl.col("ix").map_elements(lambda i: x1[i], return_dtype=pl.Float64).alias("xmax"),
        pl.col("iy").map_elements(lambda i: y0[i], return_dtype=pl.Float64).alias("ymin"),
        pl.col("iy").map_elements(lambda i: y1[i], return_dtype=pl.Float64).alias("ymax"),
    )


def plot_map(result: MapResult):
    from plotnine import (
        aes,
        element_blank,
        element_text,
        geom_line,
        geom_rect,
        ggplot,
        labs,
        scale_alpha_continuous,
        scale_fill_manual,
        scale_x_continuous,
        scale_x_log10,
        scale_y_continuous,
        scale_y_log10,
        theme,
        theme_bw,
    )

    spec = result.spec
    ax_x, ax_y = AXES[spec.x], AXES[spec.y]
    df = _pd(_frame(result))
    colors = {p: POLICY_COLORS.get(p, "#CC79A7") for p in spec.policies}
    colors |= {"tie": TIE_COLOR, "unstable": UNSTABLE_COLOR}
    labels = [*spec.policies, "tie (95% CI of margin spans 0)", "unstable (no stable policy)"]
    p = (
        ggplot(df)
        + geom_rect(
            aes(xmin="xmin", xmax="xmax", ymin="ymin", ymax="ymax", fill="cell", alpha="shade")
        )
        + scale_fill_manual(
            values=colors, breaks=list(colors), limits=list(colors), labels=labels, name="winner"
        )
        + scale_alpha_continuous(
            range=(0.3, 1.0),
            limits=(0.0, MARGIN_CAP),
            name="margin over runner-up\n(fraction of winner's value)",
        )
    )
    p += _scale(ax_x, spec.x, "x", scale_x_log10, scale_x_continuous)
    p += _scale(ax_y, spec.y, "y", scale_y_log10, scale_y_continuous)
    line = _breakeven_line(result)
    if line is not None:
        p += geom_line(aes("x", "y"), data=line, color="black", linetype="dashed", size=0.9)
    be_note = "dashed: analytic break-even (transfer = recompute)" if line is not None else ""
    metric = METRICS[spec.metric]
    p += labs(
        title=f"Decision map: {spec.model}, {spec.workload}",
        subtitle=f"winner by {metric.label}, {spec.seeds} seeds × {spec.requests} requests/cell. {be_note}",
        x=ax_x.label + (" (log scale)" if ax_x.log else ""),
        y=ax_y.label + (" (log scale)" if ax_y.log else ""),
    )
    p += theme_bw(base_size=10) + theme(
        legend_position="right",
        plot_subtitle=element_text(size=8),
        legend_title=element_text(size=8),
        panel_grid=element_blank(),  # grid lines would show through the translucent tiles
    )
    return p


def _scale(ax, name: str, which: str, log_scale, lin_scale):
    unit = " GB/s" if name == "bandwidth" else ""
    fmt = lambda vals: [f"{v:g}{unit}" for v in vals]  # noqa: E731
    return (log_scale if ax.log else lin_scale)(labels=fmt, expand=(0, 0))


def _breakeven_line(result: MapResult) -> pl.DataFrame | None:
    """Points of the break-even curve in plot coordinates (None when not on a bandwidth axis)."""
    spec, cells = result.spec, result.cells
    if "bandwidth" not in (spec.x, spec.y):
        return None
    other = "y" if spec.x == "bandwidth" else "x"
    pts = (
        cells.group_by(other)
        .agg(pl.col("breakeven_gbps").first())
        .drop_nulls()
        .sort(other)
        .rename({"breakeven_gbps": "x" if other == "y" else "y"})
    )
    rng = spec.xs() if spec.x == "bandwidth" else spec.ys()
    col = "x" if spec.x == "bandwidth" else "y"
    pts = pts.filter((pl.col(col) >= rng[0]) & (pl.col(col) <= rng[-1]))
    if pts.height == 0:
        return None
    if pts.height == 1 or pts[col].n_unique() == 1:  # constant: span the whole other axis
        lo, hi = tile_edges(
            spec.ys() if other == "y" else spec.xs(), AXES[getattr(spec, other)].log
        )
        v = float(pts[col][0])
        pts = pl.DataFrame({col: [v, v], other: [lo[0], hi[-1]]})
    return _pd(pts.select("x", "y"))


def save_png(result: MapResult, path: Path, size=(9.0, 6.0), dpi: int = 150) -> Path:
    """Draw the map into ``path`` atomically, with the Parquet files' mode (plots._save)."""
    from ..errors import ArtifactError

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(
            f"cannot write here ({e.strerror})",
            where=str(path.parent),
            fix="choose a writable --out",
        ) from None
    return _save(plot_map(result), path, size, dpi=dpi)


def write_map(result: MapResult, out) -> list:
    """decision_map.parquet, map_runs.parquet and decision_map.png in ``out``."""
    from prefixbench.io.artifacts import write_atomic

    out = Path(out)
    spec = result.spec
    meta = {
        "model": spec.model,
        "workload": spec.workload,
        "metric": spec.metric,
        "x": spec.x,
        "y": spec.y,
        "seeds": spec.seeds,
        "requests": spec.requests,
        "warmup": spec.warmup,
        "policies": spec.policies,
        "set": spec.overrides,
    }
    return [
        write_atomic(result.cells, out / "decision_map.parquet", "decision_map", meta),
        write_atomic(result.runs, out / "map_runs.parquet", "map_runs", meta),
        save_png(result, out / "decision_map.png"),
    ]
