#!/usr/bin/env python
"""Where the reference study's answers move: the same questions on three settings.

    python benchmarks/answers.py [--out NEW_DIR] [--map-points 8] [--jobs 1] [--quick]

Runs, on the current model ("after"), on it with the two mechanisms added beside physics
v2 switched off ("physics": no prefill-side KV hold, no local prefill in cost_aware) and on
the settings that undo physics v2 as far as settings reach ("before", ``BEFORE`` below):

* the reference study (`prefixbench sweep`, 672 runs) and the balanced recommendation of
  each of its 32 model × workload × budget points (`recommend`'s rule on its results);
* the analytic transfer-vs-recompute crossover (`prefixbench crossover`'s rows: the study's
  models × the default accelerators × every catalog link, one NIC);
* the decision map (`prefixbench map qwen2-1.5b --points N`, all policies, tool_call).

Writes DIR/answers.json (every figure compared) and DIR/answers.md (the table of
docs/validation.md "Where the answers move") and prints the table. About 2.5 CPU-minutes
with an engine already compiled (the first engine import of a checkout compiles for about
a minute more). ``--quick`` is a smoke test of the script (`sweep --quick`, a small map).

"before" is: a flat GEMM efficiency of 0.5 (gemm_half_tokens 0), attention at 0.5, the KV
stream at the weights' MBU 0.7, no per-request or per-prompt-token cost, links at line rate
with no per-transfer setup and no NIC ceiling, no prefill-side KV hold and no local prefill
in cost_aware. Not expressible as a setting, so the same in every column: the per-operator
sum of max(compute, memory) (before: one max per step), the engine's other changes (e.g.
requests that wait for KV memory instead of being rejected), FP8/INT8 tensor peaks (the
study's models are bf16) and the TP all-reduce (the study runs one device per instance).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# the physics v2 terms, undone by settings
PHYSICS_OFF = [
    "efficiency.mfu_prefill=0.5",
    "efficiency.mfu_decode=0.5",
    "efficiency.gemm_half_tokens=0",
    "efficiency.mfu_attention=0.5",
    "efficiency.mbu=0.7",
    "efficiency.mbu_kv=0.7",
    "efficiency.request_overhead_ms=0",
    "efficiency.prompt_overhead_us=0",
    "cluster.link.efficiency=1",
    "cluster.link.setup_us=0",
    "cluster.link.ceiling_gbps=100000",
]
# the two mechanisms added with it, default on
MECHANISMS_OFF = ["memory.prefill_hold=false", "cluster.cost_aware_local_prefill=false"]
BEFORE = PHYSICS_OFF + MECHANISMS_OFF
SETTINGS = {"before": BEFORE, "physics": MECHANISMS_OFF, "after": []}
# (column heading, from setting, to setting)
STEPS = [
    ("physics v2 (before → physics)", "before", "physics"),
    ("prefill hold + cost_aware local prefill (physics → after)", "physics", "after"),
    ("both (before → after)", "before", "after"),
]
MAP_MODEL = "qwen2-1.5b"


# ---------------------------------------------------------------- running the commands


SRC = Path(__file__).resolve().parents[1] / "src"


def _cli(args: list[str]) -> str:
    """`prefixbench ARGS` in a fresh process (this checkout's source), stdout."""
    env = dict(os.environ, COLUMNS="80", NO_COLOR="1")
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "prefixbench", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): prefixbench {' '.join(args)}\n{r.stderr.strip()}")
    return r.stdout


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def run_study(folder: Path, overrides: list[str], jobs: int, quick: bool) -> Path:
    grid = ["--quick"] if quick else []
    _cli(["sweep", *grid, "--jobs", str(jobs), "--out", str(folder), *_sets(overrides)])
    return folder


def run_map(folder: Path, overrides: list[str], points: int, jobs: int, quick: bool) -> dict:
    args = ["map", MAP_MODEL, "--points", str(points), "--jobs", str(jobs), "--json"]
    small = ["--requests", "100", "--warmup", "20"] if quick else []
    return json.loads(_cli([*args, *small, "--out", str(folder), *_sets(overrides)]))


# ---------------------------------------------------------------- reading the answers


def study_answers(folder: Path) -> dict:
    """Per (model, workload, budget): the balanced recommendation; per (…, policy): mean
    TTFT, mean TPOT and whether the runs were stable."""
    import polars as pl

    from prefixbench.study.recommend import recommend

    agg = pl.read_parquet(folder / "agg.parquet")
    rec = recommend(agg, pl.read_parquet(folder / "runs.parquet"), "balanced")
    point = ("model", "workload", "budget_factor")
    recs = {
        tuple(r[k] for k in point): {k: r[k] for k in ("recommended", "tie", "tied_with")}
        for r in rec.to_dicts()
    }
    runs = {
        (*(r[k] for k in point), r["policy"]): {
            k: r[k] for k in ("ttft_mean_ms", "tpot_mean_ms", "stable")
        }
        for r in agg.to_dicts()
    }
    return {"recommend": recs, "runs": runs, "models": sorted(agg["model"].unique())}


def _before_efficiency_and_link(overrides: list[str]):
    """The Efficiency and the link fields a list of --set overrides gives the crossover."""
    from prefixbench.physics.costmodel import Efficiency

    eff, link = {}, {}
    for o in overrides:
        key, value = o.split("=", 1)
        group, _, name = key.rpartition(".")
        if group == "efficiency":
            eff[name] = float(value)
        elif group == "cluster.link":
            link[name] = float(value)
    return Efficiency(**eff), link


def crossover_answers(models: list[str], overrides: list[str]) -> dict:
    """`prefixbench crossover`'s analytic rows under the overrides' efficiency and link
    fields (the swept accelerator, h100-sxm, is one of the defaults)."""
    from prefixbench import catalog
    from prefixbench.study.crossover import DEFAULT_ACCELERATORS, analytic_row

    eff, link = _before_efficiency_and_link(overrides)
    keep = ("winner_at_ref", "tie_bandwidth_gbytes_per_s", "transfer_ms_at_ref",
            "recompute_ms_at_ref", "recompute_wins_from", "recompute_wins_until")  # fmt: skip
    out = {}
    for m in models:
        for a in [*DEFAULT_ACCELERATORS]:
            for k in catalog.LINKS:
                row = analytic_row(m, a, k, eff=eff, link_update=link or None)
                out[(m, a, k)] = {f: row[f] for f in keep}
    return out


def map_answers(doc: dict) -> dict:
    cells = {(c["x"], c["y"]): (c["state"], c["winner"]) for c in doc["cells"]}
    even = sorted({round(c["breakeven_gbps"], 4) for c in doc["cells"] if c["breakeven_gbps"]})
    return {"cells": cells, "breakeven_gbps": even}


# ---------------------------------------------------------------- comparing


def _span(values: list[float], fmt: str) -> str:
    if not values:
        return "none"
    med = statistics.median(values)
    return f"{fmt.format(min(values))} to {fmt.format(max(values))}, median {fmt.format(med)}"


def _rec(r: dict) -> str:
    return r["recommended"] + (" (tie)" if r["tie"] else "")


def compare_recommend(b: dict, a: dict) -> dict:
    """Changed recommendations, and those that are a decisive win on both sides."""
    changed = [k for k in a if k in b and a[k]["recommended"] != b[k]["recommended"]]
    decisive = [k for k in changed if not a[k]["tie"] and not b[k]["tie"]]
    return {
        "points": len(a),
        "changed": len(changed),
        "decisive_both": [f"{k[0]} {k[1]} {k[2]:g}: {_rec(b[k])} → {_rec(a[k])}" for k in decisive],
        "changed_list": [f"{k[0]} {k[1]} {k[2]:g}: {_rec(b[k])} → {_rec(a[k])}" for k in changed],
    }


def compare_runs(b: dict, a: dict) -> dict:
    both = [k for k in a if k in b and a[k]["stable"] and b[k]["stable"]]
    dttft = [a[k]["ttft_mean_ms"] - b[k]["ttft_mean_ms"] for k in both]
    dtpot = [100 * (a[k]["tpot_mean_ms"] / b[k]["tpot_mean_ms"] - 1) for k in both]
    return {
        "stable_in_both": len(both),
        "ttft_mean_ms_change": _span(dttft, "{:+,.1f}"),
        "tpot_mean_pct_change": _span(dtpot, "{:+.1f} %"),
        "became_unstable": sum(1 for k in a if k in b and b[k]["stable"] and not a[k]["stable"]),
        "became_stable": sum(1 for k in a if k in b and a[k]["stable"] and not b[k]["stable"]),
    }


def _interval(r: dict) -> str:
    lo, hi = r["recompute_wins_from"], r["recompute_wins_until"]
    return "never" if math.isnan(lo) else f"{lo:,.0f}–{hi:,.0f}"


def compare_crossover(b: dict, a: dict) -> dict:
    flips = [k for k in a if a[k]["winner_at_ref"] != b[k]["winner_at_ref"]]
    ratios: dict[str, list[float]] = {}
    for k in a:
        tb, ta = b[k]["tie_bandwidth_gbytes_per_s"], a[k]["tie_bandwidth_gbytes_per_s"]
        if tb > 0 and ta > 0:  # NaN compares False: no tie bandwidth on one side
            ratios.setdefault(k[2], []).append(ta / tb)
    moved = [k for k in a if _interval(a[k]) != _interval(b[k])]
    return {
        "rows": len(a),
        "winner_flips": [
            f"{' '.join(k)}: {b[k]['winner_at_ref']} → {a[k]['winner_at_ref']}" for k in flips
        ],  # fmt: skip
        "tie_ratio_by_link": {ln: (min(v), max(v)) for ln, v in sorted(ratios.items())},
        "recompute_wins_moved": len(moved),
        "recompute_wins": {" ".join(k): (_interval(b[k]), _interval(a[k])) for k in moved},
    }


def compare_map(b: dict, a: dict) -> dict:
    """Cells whose state (win / tie / unstable) changed, and cells that are a win on both
    sides with another winner; the rest of the changes name another policy of a tie."""
    cells_b, cells_a = b["cells"], a["cells"]
    changed = [k for k in cells_a if cells_a[k] != cells_b.get(k)]
    state = [k for k in changed if cells_a[k][0] != cells_b[k][0]]
    flips = [k for k in changed if cells_a[k][0] == cells_b[k][0] == "win"]
    return {
        "cells": len(cells_a),
        "changed": len(changed),
        "state_changed": len(state),
        "win_flips": len(flips),
        "changed_list": [
            f"{k[0]:g} GB/s, budget {k[1]:g}: {cells_b[k]} → {cells_a[k]}" for k in changed
        ],  # fmt: skip
        "breakeven_gbps": (b["breakeven_gbps"], a["breakeven_gbps"]),
    }


# ---------------------------------------------------------------- the table


def _tie_ratios(c: dict) -> str:
    """Per link, the range of after / before over its rows ('' where none moves)."""
    parts = [f"{ln} ×{lo:.2f}" + (f"–{hi:.2f}" if hi - lo > 0.005 else "")
             for ln, (lo, hi) in c["tie_ratio_by_link"].items()
             if abs(lo - 1) > 0.0005 or abs(hi - 1) > 0.0005]  # fmt: skip
    return ", ".join(parts)


def _pair(cx: dict, key: str) -> str:
    b, a = cx["before_rows"][key], cx["after_rows"][key]
    return (f"{b['recompute_ms_at_ref']:.1f} → {a['recompute_ms_at_ref']:.1f} ms recompute, "
            f"{b['transfer_ms_at_ref']:.2f} → {a['transfer_ms_at_ref']:.2f} ms transfer, "
            f"tie {b['tie_bandwidth_gbytes_per_s']:.2f} → "
            f"{a['tie_bandwidth_gbytes_per_s']:.2f} GB/s")  # fmt: skip


def _shown(cx: dict) -> list[str]:
    """The crossover rows the table spells out: the map's model (else the first) on
    h100-sxm over the presets' link and the two RDMA links."""
    models = sorted({k.split()[0] for k in cx["after_rows"]})
    m = MAP_MODEL if MAP_MODEL in models else models[0]
    return [f"{m} h100-sxm {ln}" for ln in ("eth-25g", "roce-200g", "ib-ndr400")]


def _rows_of(c: dict) -> list[tuple[str, str]]:
    """(answer, what moved) rows of one comparison."""
    rc, ru, cx, mp = c["recommend"], c["runs"], c["crossover"], c["map"]
    h100 = [f"{k.split()[0]} {k.split()[2]}: {v[0]} → {v[1]}"
            for k, v in cx["recompute_wins"].items() if k.split()[1] == "h100-sxm"]  # fmt: skip
    flips = cx["winner_flips"]
    even = [", ".join(map(str, e)) for e in mp["breakeven_gbps"]]
    return [
        (f"`recommend` (balanced), {rc['points']} model × workload × budget points",
         f"{rc['changed']} change; a decisive win on both sides: "
         f"{'; '.join(rc['decisive_both']) or 'none'}"),
        ("mean TTFT, runs stable on both sides", f"{ru['ttft_mean_ms_change']} ms "
         f"({ru['stable_in_both']} runs)"),
        ("mean TPOT, the same runs", ru["tpot_mean_pct_change"]),
        ("stable ↔ unstable runs",
         f"{ru['became_unstable']} became unstable, {ru['became_stable']} stable"),
        (f"`crossover`, winner at the 2,048-token reference prefix ({cx['rows']} rows)",
         f"{len(flips)} change{': ' if flips else ''}{'; '.join(flips)}"),
        ("`crossover`, line rate at which recompute ties, ratio", _tie_ratios(cx) or "unchanged"),
        *[(f"`crossover`, {key}, reference prefix", _pair(cx, key)) for key in _shown(cx)],
        ("`crossover`, recompute-wins interval (tokens), h100-sxm",
         f"{'; '.join(h100) or 'unchanged'} ({cx['recompute_wins_moved']} of {cx['rows']} "
         "rows move in all)"),
        (f"`map` {MAP_MODEL} tool_call, {mp['cells']} cells",
         f"{mp['changed']} change: {mp['state_changed']} change state (win / tie / unstable), "
         f"{mp['win_flips']} a decisive winner, the rest another policy named in a tie; "
         f"break-even {even[0]} → {even[1]} GB/s"),
    ]  # fmt: skip


def table(res: dict) -> str:
    """The markdown table: one row per answer, one column per step of STEPS."""
    cols = [_rows_of(res["steps"][head]) for head, _, _ in STEPS]
    lines = ["| answer | " + " | ".join(head for head, _, _ in STEPS) + " |",
             "|---|" + "---|" * len(STEPS)]  # fmt: skip
    for i, (label, _) in enumerate(cols[0]):
        lines.append(f"| {label} | " + " | ".join(col[i][1] for col in cols) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- main


def compare(b: dict, a: dict) -> dict:
    """Every comparison of two settings' answers."""
    cx = compare_crossover(b["crossover"], a["crossover"])
    cx["before_rows"] = {" ".join(k): v for k, v in b["crossover"].items()}
    cx["after_rows"] = {" ".join(k): v for k, v in a["crossover"].items()}
    return {
        "recommend": compare_recommend(b["study"]["recommend"], a["study"]["recommend"]),
        "runs": compare_runs(b["study"]["runs"], a["study"]["runs"]),
        "crossover": cx,
        "map": compare_map(b["map"], a["map"]),
    }


def measure(out: Path, points: int, jobs: int, quick: bool = False) -> dict:
    got = {}
    for name, overrides in SETTINGS.items():
        study = study_answers(run_study(out / name / "results", overrides, jobs, quick))
        got[name] = {
            "study": study,
            "crossover": crossover_answers(study["models"], overrides),
            "map": map_answers(run_map(out / name / "map", overrides, points, jobs, quick)),
        }
    steps = {head: compare(got[b], got[a]) for head, b, a in STEPS}
    return {"settings": SETTINGS, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="working folder (default: a temp dir)")
    ap.add_argument("--map-points", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: `sweep --quick` and a 100-request map (not the study)",
    )
    args = ap.parse_args()
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        # `sweep` resumes a folder's finished runs: an old folder would give old answers
        sys.exit(f"{args.out} is not empty: choose a new or empty --out folder")
    out = args.out or Path(tempfile.mkdtemp(prefix="answers-"))
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(SRC))  # this checkout's prefixbench, as in the commands it runs
    res = measure(out, 3 if args.quick else args.map_points, args.jobs, args.quick)
    md = table(res)
    from prefixbench.io.export import dumps  # NaN (no such length, no tie) as null

    (out / "answers.json").write_text(dumps(res, indent=1))
    (out / "answers.md").write_text(md)
    print(md)
    print(f"details: {out / 'answers.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
