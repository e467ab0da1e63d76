"""Per-instance utilisation, MFU and MBU of a run, from the engine's per-instance busy
times, FLOPs and bytes (SimResult.stats; docs/model.md "Per-instance figures").

* window: the steady window [t_warm, t_steady], from the end of warm-up to the last arrival
  (the drain after it is not steady state; docs/model.md "Utilisation"); the engine counts
  the busy time, FLOPs and bytes of steps started in it, clipped at its end.
* utilisation: busy time ÷ the steady window per instance is in
  ``stats["prefill_busy_s"]`` / ``stats["decode_busy_s"]``; the summary's
  ``*_util_min/max`` (stability.instance_busy) are the same figures.
* MFU: FLOPs the instance's steps executed ÷ (window × peak FLOP/s of its devices).
* MBU: bytes its steps read (weights and KV) ÷ (window × HBM bandwidth of its devices).
* ``decode_mbu_busy``: decode bytes ÷ (busy time × HBM bandwidth), as seed 003 reports it
  ("a mean batch of about 14 with an MBU of about 77 %: memory-bound"): how close the
  decode steps run to the memory roofline while they run, whatever the load.

Peaks are the catalog's datasheet figures (catalog/accelerators.py) times the devices per
instance. Each figure is reported for the least and the most loaded instance, so a split
(2P1D with one prefill at 47 %, the other at 13 %) is visible in one summary row.
"""

from __future__ import annotations

from prefixbench import catalog


def _peaks(spec) -> tuple[float, float]:
    dev = catalog.get_accelerator(spec.accelerator)
    return dev.peak_tflops * 1e12 * spec.devices, dev.hbm_gbps * 1e9 * spec.devices


def _span(xs: list[float]) -> tuple[float | None, float | None]:
    return (min(xs), max(xs)) if xs else (None, None)


def instance_figures(scenario, stats: dict) -> dict:
    """The summary row's per-instance columns (min and max over instances of each role)."""
    window = float(stats.get("t_steady", stats["t_end"])) - float(stats["t_warm"])
    c = scenario.cluster
    out: dict = {}
    roles = [("decode", c.decode)]
    if c.mode != "colocated":
        roles.insert(0, ("prefill", c.prefill))
    for role, spec in roles:
        flops_peak, bw = _peaks(spec)
        fl, by = stats.get(f"{role}_flops", []), stats.get(f"{role}_bytes", [])
        ok = window > 0
        mfu = [f / window / flops_peak for f in fl] if ok else []
        mbu = [b / window / bw for b in by] if ok else []
        for name, xs in (("mfu", mfu), ("mbu", mbu)):
            lo, hi = _span(xs)
            out[f"{role}_{name}_inst_min"] = lo
            out[f"{role}_{name}_inst_max"] = hi
    busy = stats.get("decode_busy_s", [])
    by = stats.get("decode_bytes", [])
    _, bw = _peaks(c.decode)
    tot = sum(busy)
    out["decode_mbu_busy"] = sum(by) / tot / bw if tot > 0 else None
    return out
