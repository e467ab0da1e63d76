"""`prefixbench cost`: step times of a model on an accelerator, with FLOPs, bytes and bound."""

import json
from typing import Annotated

import typer
from rich.table import Table

from .app import _csv, app, guarded, out

_TOKENS = "512,2048,8192,32768"
_BATCH = "1,16,64,256"
_CONTEXT = "1024,4096"


def _ints(option: str, values: list[str] | None, default: str) -> list[int]:
    from ..errors import ScenarioError

    items = _csv(values) or default.split(",")
    try:
        return [int(v.replace("_", "")) for v in items]
    except ValueError:
        raise ScenarioError(
            f"not an integer list: {','.join(items)}",
            where=option,
            fix="give comma-separated whole numbers, e.g. 1,16,64",
        ) from None


def _table(title: str, columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def _si(x: float) -> str:
    """FLOPs with an SI prefix, 3 significant figures (7.22 T, 15.5 G)."""
    for div, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= div:
            return f"{x / div:.3g} {p}"
    return f"{x:.3g}"


def _roof_cells(r: dict) -> list[str]:
    return [
        _si(r["flops"]),
        f"{r['bytes'] / 1e9:,.2f}",
        f"{r['compute_ms']:,.2f}",
        f"{r['memory_ms']:,.2f}",
        r["bound"],
        f"{r['ms']:,.2f}",
    ]


_ROOF_COLS = ["FLOP", "GB", "compute ms", "memory ms", "bound", "step ms"]


def _tokens(r: dict) -> str:
    return f"{r['tokens']:,}" + ("*" if r["beyond_max_context"] else "")


def _beyond_note(rep: dict) -> None:
    if any(r["beyond_max_context"] for r in rep["prefill"]):
        out.print(
            f"* longer than the model's max context "
            f"({rep['figures']['max_context']:,} tokens): extrapolated",
            highlight=False,
        )


def _comm_note(rep: dict) -> None:
    """Say how much of each step ms above is fabric time (docs/model.md §2.8)."""
    f = rep["figures"]
    if f["comm_seconds_per_step"] or f["comm_seconds_per_token"]:
        parts = (
            ", ".join(f"{r['tokens']:,} tok {r['comm_ms']:,.2f}" for r in rep["prefill"])
            + "; "
            + ", ".join(f"batch {r['batch']:,} {r['comm_ms']:,.2f}" for r in rep["decode"][::2])
        )
        out.print(f"step ms includes TP comm on {rep['fabric']} (ms): {parts}", highlight=False)


def _render_transfer(rep: dict) -> None:
    """One row per (link, prefix length): latency + setup + KV / min(η · NICs · line rate,
    ceiling)."""
    t = _table(
        f"KV transfer of a prefix over {rep['nics']} NIC(s): latency + setup + wire (ms)",
        ["link", "tokens", "KV MB", "η", "GB/s", "fixed", "wire", "total"],
    )
    for r in rep["transfer"]:
        t.add_row(
            r["link"],
            f"{r['tokens']:,}",
            f"{r['bytes'] / 1e6:,.1f}",
            f"{r['efficiency']:.3g}",
            f"{r['effective_gbps']:,.1f}",
            f"{r['latency_ms'] + r['setup_ms']:,.3f}",
            f"{r['wire_ms']:,.2f}",
            f"{r['ms']:,.2f}",
        )
    out.print(t)
    capped = {r["link"] for r in rep["transfer"] if _capped(r)}
    for link in sorted(capped):
        r = next(r for r in rep["transfer"] if r["link"] == link)
        out.print(
            f"{link}: GB/s is the instance's ceiling {r['ceiling_gbps']:g} (η · NICs · line "
            f"rate would be {r['efficiency'] * r['nics'] * r['bandwidth_gbps']:,.1f})",
            highlight=False,
        )


def _capped(r: dict) -> bool:
    """Is this transfer row at its link's per-instance ceiling rather than η · NICs · line?"""
    ceiling = r.get("ceiling_gbps")
    return ceiling is not None and r["efficiency"] * r["nics"] * r["bandwidth_gbps"] > ceiling


def _render(rep: dict) -> None:
    f = rep["figures"]
    eff = rep["efficiency"]
    head = _table(f"{rep['model']} on {rep['devices']}× {rep['accelerator']}", ["figure", "value"])
    for label, value in [
        ("KV bytes per token", f"{f['kv_bytes_per_token']:,.0f}"),
        ("weights (GB)", f"{f['weight_bytes'] / 1e9:,.2f}"),
        ("linear GFLOP per token", f"{f['linear_flops_per_token'] / 1e9:,.3f}"),
        ("LM-head GFLOP per logits token", f"{f['lm_head_flops_per_token'] / 1e9:,.3f}"),
        ("attention FLOP per (query, key) pair", f"{f['attention_flops_per_pair']:,.0f}"),
        ("ridge point (FLOP/byte)", f"{f['ridge_flops_per_byte']:,.0f}"),
        ("ridge after efficiency, prefill", f"{f['effective_ridge_prefill']:,.0f}"),
        ("ridge after efficiency, decode", f"{f['effective_ridge_decode']:,.0f}"),
        (f"TP comm on {rep['fabric']}, per step", f"{f['comm_seconds_per_step'] * 1e3:.3g} ms"),
        ("TP comm per step token", f"{f['comm_seconds_per_token'] * 1e6:.3g} µs"),
        (
            "efficiency (MFU p/d, MBU, overhead)",
            f"{eff['mfu_prefill']:.3g}/{eff['mfu_decode']:.3g}, {eff['mbu']:.3g}, "
            f"{eff['prefill_overhead_ms']:.3g}/{eff['decode_overhead_ms']:.3g} ms",
        ),
        *(
            [("GEMM kernel fixed time (each)", f"{eff['gemm_kernel_us']:.3g} µs")]
            if eff.get("gemm_kernel_us")
            else []
        ),
    ]:
        head.add_row(label, value)
    out.print(head)

    t = _table("Prefill step, one prompt, nothing cached", ["tokens", *_ROOF_COLS, "attn"])
    for r in rep["prefill"]:
        t.add_row(_tokens(r), *_roof_cells(r), f"{r['attention_flops_share']:.0%}")
    out.print(t)
    _beyond_note(rep)

    t = _table("Decode iteration (context per sequence)", ["batch", "context", *_ROOF_COLS])
    for r in rep["decode"]:
        t.add_row(f"{r['batch']:,}", f"{r['context']:,}", *_roof_cells(r))
    out.print(t)
    _comm_note(rep)

    t = _table(
        "Recompute a prefix on the decode instance (break-even: recompute wins below)",
        ["tokens", *_ROOF_COLS, "GB/s"],
    )
    for r in rep["recompute"]:
        t.add_row(_tokens(r), *_roof_cells(r), f"{r['break_even_gbps']:,.2f}")
    out.print(t)

    _render_transfer(rep)

    t = _table(
        "Prefix lengths where recompute beats transfer (searched up to the max context)",
        ["link", "from", "to"],
    )
    for r in rep["break_even"]:
        lo, hi = r["recompute_wins_from"], r["recompute_wins_to"]
        t.add_row(r["link"], "never" if lo is None else f"{lo:,}", "" if hi is None else f"{hi:,}")
    out.print(t)


@app.command("cost")
@guarded
def cost(
    model: Annotated[str, typer.Argument(help="A catalog model name or a config.json path.")],
    accelerator: Annotated[
        str, typer.Option("--accelerator", "-a", help="Accelerator of the instance.")
    ] = "h100-sxm",
    devices: Annotated[int, typer.Option("--devices", help="Devices per instance (TP).")] = 1,
    fabric: Annotated[
        str | None,
        typer.Option("--fabric", help="Scale-up fabric (default: the accelerator's; or ideal)."),
    ] = None,
    link: Annotated[
        list[str] | None,
        typer.Option("--link", help="Link(s) for the transfer tables (repeat or comma-separate)."),
    ] = None,
    tokens: Annotated[
        list[str] | None, typer.Option("--tokens", help=f"Prompt/prefix lengths [{_TOKENS}].")
    ] = None,
    batch: Annotated[
        list[str] | None, typer.Option("--batch", help=f"Decode batch sizes [{_BATCH}].")
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option("--context", help=f"Decode context per sequence [{_CONTEXT}]."),
    ] = None,
    efficiency: Annotated[
        str | None,
        typer.Option("--efficiency", help="An efficiency YAML (from `prefixbench calibrate`)."),
    ] = None,
    nics: Annotated[
        int, typer.Option("--nics", help="NICs a transfer is sharded over (per instance).")
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print strict JSON.")] = False,
) -> None:
    """Prefill, decode, transfer and recompute times, each with FLOPs, bytes and its bound."""
    from prefixbench.physics.costreport import cost_report

    eff = None
    if efficiency:
        from prefixbench.scenario.loader import load_efficiency

        eff = load_efficiency(efficiency)
    rep = cost_report(
        model,
        accelerator=accelerator,
        devices=devices,
        links=_csv(link),
        tokens=_ints("--tokens", tokens, _TOKENS),
        batch=_ints("--batch", batch, _BATCH),
        context=_ints("--context", context, _CONTEXT),
        efficiency=eff,
        fabric=fabric,
        nics=nics,
    )
    if as_json:
        out.print_json(json.dumps(rep, allow_nan=False))
        return
    _render(rep)


def _render_calibration(res: dict) -> None:
    t = _table("Fitted efficiency", ["parameter", "value", "from the data?"])
    for k, v in res["efficiency"].items():
        t.add_row(k, f"{v:.4g}", "yes" if k in res["constrained"] else "no: kept default")
    out.print(t)
    t = _table("Fit error (mean absolute % error)", ["kind", "fitted", "defaults"])
    for k, v in res["mape_percent"].items():
        t.add_row(k, f"{v:.1f} %", f"{res['mape_percent_at_defaults'][k]:.1f} %")
    out.print(t)
    t = _table("Measurements", ["what", "measured ms", "fitted ms", "defaults ms"])
    for r in res["rows"]:
        t.add_row(
            r["what"],
            f"{r['measured_ms']:,.3f}",
            f"{r['fitted_ms']:,.3f}",
            f"{r['default_ms']:,.3f}",
        )
    out.print(t)
    if res["out"]:
        out.print(f"wrote {res['out']}", highlight=False)


@app.command("calibrate")
@guarded
def calibrate_cmd(
    profile: Annotated[
        list[str],
        typer.Argument(
            help="Measured steps: a CSV (phase,tokens,batch,context,devices,ms) or "
            "vLLM `bench serve`/`bench latency` result JSON; several allowed."
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Model of rows without a model column."),
    ] = None,
    accelerator: Annotated[
        str, typer.Option("--accelerator", "-a", help="Accelerator of rows without one.")
    ] = "h100-sxm",
    devices: Annotated[
        int, typer.Option("--devices", help="Devices (TP) of rows without a devices column.")
    ] = 1,
    input_len: Annotated[
        int | None, typer.Option("--input-len", help="`vllm bench latency` --input-len.")
    ] = None,
    output_len: Annotated[
        int | None, typer.Option("--output-len", help="`vllm bench latency` --output-len.")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="`vllm bench latency` --batch-size.")
    ] = None,
    out_path: Annotated[
        str | None, typer.Option("--out", "-o", help="Write the efficiency block (YAML) here.")
    ] = None,
    fit: Annotated[
        list[str] | None,
        typer.Option(
            "--fit",
            metavar="PARAM,…",
            help="Parameters to fit (the others keep their defaults): any of mfu_prefill, "
            "mfu_decode, mbu, prefill_overhead_ms, decode_overhead_ms, request_overhead_ms, "
            "prompt_overhead_us; default: the first six; all: the seven. The per-request and "
            "per-prompt-token costs need client-side `ttft` rows (beside server-side "
            "`prefill` rows, to split them from the step).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print strict JSON.")] = False,
) -> None:
    """Fit MFU, MBU, the per-step overheads and the per-request fixed costs to measured step
    times and client-side TTFTs (least squares)."""
    from prefixbench.physics.calibrate import calibrate

    lengths = {
        k: v
        for k, v in (
            ("input_len", input_len),
            ("output_len", output_len),
            ("batch_size", batch_size),
        )
        if v is not None
    }
    res = calibrate(profile, model, accelerator, devices, lengths, out_path, _csv(fit))
    if as_json:
        out.print_json(json.dumps(res, allow_nan=False))
        return
    _render_calibration(res)
