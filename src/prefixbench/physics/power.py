"""Device power, the power cap and DVFS, and a run's energy (docs/model.md §2.11).

Per device (datasheet TDP, idle power and memory energy per bit from the catalog):

* memory power at the effective bandwidth ``P_mem = pJ/bit · 8 · HBM B/s · MBU``;
* compute power at full clock ``P_comp = TDP − idle − P_mem``, so that a step at the ridge
  (compute and memory both at their effective rates) draws exactly TDP, and no step more:
  an uncapped device never throttles, and its results are bit-identical to no power model;
* energy per FLOP at nominal clock ``P_comp / (peak · max(MFU_prefill, MFU_decode))``,
  energy per byte ``pJ/bit · 8``.

**Power cap** (``cluster.*.power_cap_w``, per device, at most TDP): the core clock drops to
the fraction ``f`` at which that worst-case step draws the cap. Compute power at clock ``f``
is ``P_comp · f · max(f, v)²`` (switching energy per operation ∝ V², voltage ∝ clock down to
the floor ``v``); the memory clock is not lowered, so

    idle + P_comp · f · max(f, v)² + P_mem = cap.

The instance's FLOP rates are multiplied by ``f`` (the memory rate is not): a compute-bound
step (prefill) slows by ``1/f``, a memory-bound one (decode) not at all until ``f`` falls
below its compute-to-memory time ratio, the knee, near ``cap = idle + P_mem``. A cap at or
below ``idle + P_mem`` cannot be met by the core clock and is refused.

**DVFS** (``cluster.*.dvfs``): a memory-bound step runs its cores at the clock at which its
compute just fills its memory time (``f · t_compute / t_memory``), which costs no time and
saves ``J/FLOP · (1 − clock²)`` per FLOP down to the voltage floor. The engine accounts it
per step (engine/power.py); a decode segment's clock is set from its totals.

Energy of an instance over the measured window = idle power × window + the engine's
dynamic joules; the KV link adds ``LINK_PJ_PER_BIT`` per byte moved.
"""

from __future__ import annotations

from dataclasses import replace

from prefixbench.errors import CatalogError, ScenarioError
from prefixbench.physics.costmodel import gemm_constants, weight_mbu

VOLT_FLOOR = 0.5  # assumption: the voltage stops falling below half the nominal clock
# KV link energy (assumption): a 400 Gb/s NIC port draws on the order of 20 W at line rate
# (ConnectX-7 class adapters list 20-25 W typical), 20 W / 400 Gb/s = 50 pJ/bit per end;
# both ends count.
LINK_PJ_PER_BIT = 100.0


def _figures(dev, where: str) -> tuple[float, float, float]:
    if dev.tdp_w is None or dev.idle_w is None or dev.memory_pj_per_bit is None:
        raise CatalogError(
            f"accelerator {dev.name} has no power figures (tdp_w, idle_w, memory_pj_per_bit)",
            where=where,
            fix="add them to the hardware file (docs/catalog.md), or drop power_cap_w",
        )
    return float(dev.tdp_w), float(dev.idle_w), float(dev.memory_pj_per_bit)


def device_power(dev, eff, where: str = "accelerator") -> dict[str, float]:
    """Per-device figures: idle, memory and compute power (W), J per FLOP and per byte."""
    tdp, idle, pj = _figures(dev, where)
    j_byte = pj * 8e-12
    p_mem = j_byte * dev.hbm_gbps * 1e9 * weight_mbu(eff, dev)
    p_comp = tdp - idle - p_mem
    if p_comp <= 0:
        raise CatalogError(
            f"{dev.name}: idle ({idle:g} W) plus memory power ({p_mem:.1f} W) reach its TDP "
            f"({tdp:g} W)",
            where=where,
            fix="check tdp_w, idle_w and memory_pj_per_bit",
        )
    mfu = max(gemm_constants(eff, dev)[:2])  # the device's own GEMM curve where it has one
    return {
        "tdp_w": tdp,
        "idle_w": idle,
        "mem_w": p_mem,
        "comp_w": p_comp,
        "j_per_flop": p_comp / (dev.peak_tflops * 1e12 * mfu),
        "j_per_byte": j_byte,
    }


def capped_clock(fig: dict[str, float], cap_w: float | None, where: str) -> float:
    """Core clock fraction under ``cap_w`` per device (1.0 when uncapped or at TDP)."""
    if cap_w is None or cap_w >= fig["tdp_w"]:
        if cap_w is not None and cap_w > fig["tdp_w"]:
            raise ScenarioError(
                f"power_cap_w {cap_w:g} W is above the device's TDP ({fig['tdp_w']:g} W)",
                where=where,
                fix=f"set at most {fig['tdp_w']:g} W (or leave it unset: capped at TDP)",
            )
        return 1.0
    x = (cap_w - fig["idle_w"] - fig["mem_w"]) / fig["comp_w"]
    if x <= 0:
        floor = fig["idle_w"] + fig["mem_w"]
        raise ScenarioError(
            f"power_cap_w {cap_w:g} W is at or below idle plus memory power ({floor:.1f} W): "
            "lowering the core clock cannot meet it",
            where=where,
            fix=f"set power_cap_w above {floor:.1f} W",
        )
    if x >= VOLT_FLOOR**3:
        return x ** (1.0 / 3.0)
    return x / VOLT_FLOOR**2


def with_power(cost, dev, devices: int, eff, cap_w: float | None, dvfs: bool, where: str):
    """``cost`` (an InstanceCost) with its power fields set and the cap's clock folded into
    its FLOP rates. A device without power figures and no cap or DVFS keeps ``cost``."""
    if dev.tdp_w is None and cap_w is None and not dvfs:
        return cost
    fig = device_power(dev, eff, where)
    clock = capped_clock(fig, cap_w, f"{where}.power_cap_w")
    rates = {}
    if clock != 1.0:
        rates = {
            "flops_rate_prefill": cost.flops_rate_prefill * clock,
            "flops_rate_decode": cost.flops_rate_decode * clock,
            "attn_rate": cost.attn_rate * clock,
        }
    return replace(
        cost,
        **rates,
        clock=clock,
        j_per_flop=fig["j_per_flop"],
        j_per_byte=fig["j_per_byte"],
        idle_w=fig["idle_w"] * devices,
        dvfs=1.0 if dvfs else 0.0,
        volt_floor=VOLT_FLOOR,
    )


# ---------------------------------------------------------------- a run's energy


ROLE_COLUMNS = (
    "energy_j",
    "power_mean_w",
    "power_inst_mean_w_max",
    "power_peak_w",
    "power_peak_sum_w",
    "capped_share",
)
TOTAL_COLUMNS = ("link_energy_j", "energy_j", "power_mean_w", "energy_per_token_j")


def energy_columns() -> list[str]:
    """Every energy column of a summary row, in order (None where not modelled), so rows of
    different hardware stack into one table."""
    roles = [f"{r}_{c}" for r in ("prefill", "decode") for c in ROLE_COLUMNS]
    return [*roles, *TOTAL_COLUMNS]


def _role(stats: dict, role: str, cost, window: float) -> dict:
    dyn = stats.get(f"{role}_energy_dyn_j", [])
    if not dyn or cost is None or cost.j_per_byte == 0.0:
        return {}
    joules = [cost.idle_w * window + e for e in dyn]
    mean = [j / window for j in joules] if window > 0 else [0.0] * len(joules)
    peaks = [max(p, cost.idle_w) for p in stats[f"{role}_peak_w"]]
    capped = stats[f"{role}_capped_s"]
    return {
        f"{role}_energy_j": sum(joules),
        f"{role}_power_mean_w": sum(mean),
        f"{role}_power_inst_mean_w_max": max(mean),
        f"{role}_power_peak_w": max(peaks),
        f"{role}_power_peak_sum_w": sum(peaks),
        f"{role}_capped_share": (sum(capped) / (window * len(capped))) if window > 0 else 0.0,
    }


def energy_figures(stats: dict, prefill_cost, decode_cost, tokens_out: int, link_bytes: float):
    """The summary's energy columns: joules, mean and peak power per pool and per instance,
    share of time capped, link energy and energy per output token; None where a pool's
    devices have no power figures (and then no totals). Energy per token counts the output
    tokens of the measured requests."""
    window = float(stats["t_end"]) - float(stats["t_warm"])
    out: dict = dict.fromkeys(energy_columns())
    pre = _role(stats, "prefill", prefill_cost, window)
    dec = _role(stats, "decode", decode_cost, window)
    out.update(pre)
    out.update(dec)
    if not dec or (stats.get("prefill_energy_dyn_j") and not pre):
        return out  # a pool without power figures: no totals (they would leave it out)
    link_j = link_bytes * LINK_PJ_PER_BIT * 8e-12
    total = (out["prefill_energy_j"] or 0.0) + out["decode_energy_j"] + link_j
    out["link_energy_j"] = link_j
    out["energy_j"] = total
    out["power_mean_w"] = total / window if window > 0 else 0.0
    out["energy_per_token_j"] = total / tokens_out if tokens_out > 0 else None
    return out
