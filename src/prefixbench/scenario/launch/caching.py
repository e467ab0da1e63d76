"""Prefix caching and KV transfer flags → the hand-off policy the deployment runs.

The decode server's cache decides the policy (docs/import.md, "Policy"):

- vLLM: the decode instance keeps its prefix cache (on by default in V1) and its KV
  connector pulls only the blocks it lacks (NixlConnector: ``get_num_new_matched_tokens``
  counts the tokens beyond the local hit, vllm/distributed/kv_transfer/kv_connector/v1/
  nixl_connector.py) → ``replicate_all_lru``; ``--no-enable-prefix-caching`` →
  ``transfer_per_request``; a CPU offloading connector as well (OffloadingConnector,
  LMCacheConnectorV1 with its local CPU backend) → ``replicate_tiered``.
- SGLang: a decode server keeps no radix cache unless
  ``--disaggregation-decode-enable-radix-cache`` (→ ``replicate_all_lru``); with
  ``--enable-hierarchical-cache`` too → ``replicate_tiered`` with a host pool of
  ``--hicache-ratio`` × the HBM pool (or ``--hicache-size`` GB per rank).
"""

from __future__ import annotations

from prefixbench.errors import ScenarioError

from .deploy import OFFLOAD_CONNECTORS, TRANSFER_CONNECTORS, Build
from .rows import APPROX, MAPPED, NO_EFFECT, NOT_MODELLED
from .serve import Serve

ROLES = {"prefill": {"kv_producer", "kv_both"}, "decode": {"kv_consumer", "kv_both"}}
# the write policy the host tier models: a block is copied to host memory when HBM evicts it
# (docs/model.md, replicate_tiered "Demotion"), SGLang's write_back
MODELLED_WRITE_POLICY = "write_back"


def connectors(cfg: dict) -> list[str]:
    """The connector names of a --kv-transfer-config (MultiConnector's children too)."""
    name = cfg.get("kv_connector")
    if name == "MultiConnector":
        extra = cfg.get("kv_connector_extra_config") or {}
        return [c.get("kv_connector", "") for c in extra.get("connectors", [])]
    return [name] if name else []


def offload_bytes(cfg: dict) -> int | None:
    """The OffloadingConnector's ``cpu_bytes_to_use`` (its CPU pool), if given."""
    parts = [cfg] + list((cfg.get("kv_connector_extra_config") or {}).get("connectors", []))
    for part in parts:
        if part.get("kv_connector") == "OffloadingConnector":
            value = (part.get("kv_connector_extra_config") or {}).get("cpu_bytes_to_use")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def apply_transfer(b: Build, s: Serve) -> None:
    """--kv-transfer-config (vLLM) and --disaggregation-mode / -transfer-backend (SGLang)."""
    if "kv_transfer" in s.values:
        cfg = s.get("kv_transfer")
        names = connectors(cfg)
        unknown = [n for n in names if n not in TRANSFER_CONNECTORS | OFFLOAD_CONNECTORS]
        if unknown or not names:
            raise ScenarioError(
                f"--kv-transfer-config: connector {unknown or cfg.get('kv_connector')} is not "
                "modelled",
                where=f"--{s.role}",
                fix="use NixlConnector, MooncakeConnector, P2pNcclConnector, LMCacheConnectorV1 "
                "or OffloadingConnector (MultiConnector of these)",
            )
        _check_role(s, cfg.get("kv_role"), "kv_role")
        b.row(s, s.flag("kv_transfer"), "cluster.link (the KV moves over it)", MAPPED,
              f"{'+'.join(names)}; connector software costs are not modelled")  # fmt: skip
    if "disagg_mode" in s.values:
        _check_role(s, {"prefill": "kv_producer", "decode": "kv_consumer"}.get(
            s.get("disagg_mode"), s.get("disagg_mode")), "--disaggregation-mode")  # fmt: skip
        b.row(s, s.flag("disagg_mode"), "cluster.mode disaggregated")
    if "backend" in s.values:
        b.row(s, s.flag("backend"), "cluster.link (the KV moves over it)", MAPPED,
              "transfer engine software costs are not modelled")  # fmt: skip


def _check_role(s: Serve, role: str | None, what: str) -> None:
    if s.role == "serve":
        if role not in (None, "null"):
            raise ScenarioError(f"{what} {role} on a colocated server", where="--serve",
                                fix="give this command with --prefill or --decode")  # fmt: skip
        return
    if role not in ROLES[s.role]:
        raise ScenarioError(
            f"{what} is {role!r} on the {s.role} command",
            where=f"--{s.role}",
            fix=f"the {s.role} server must be "
            + (" or ".join(sorted(ROLES[s.role])) if what == "kv_role" else s.role),
        )


def apply_prefill_cache(b: Build, s: Serve) -> None:
    """The prefill server's own prefix cache: off → cluster.prefill_cache_fraction 0."""
    off = s.get("prefix_cache") is False or s.get("no_radix") is True
    key = "prefix_cache" if "prefix_cache" in s.values else "no_radix"
    if off:
        b.set("cluster.prefill_cache_fraction", 0.0)
    if key in s.values:
        b.row(s, s.flag(key), "cluster.prefill_cache_fraction" + (" = 0" if off else ""))
    for k in ("decode_radix", "hicache", "hicache_ratio", "hicache_size", "hicache_policy"):
        if k in s.values:
            b.row(s, s.flag(k), "–", NOT_MODELLED,
                  "on a prefill server: its prefix cache is HBM only")  # fmt: skip


def decode_policy(b: Build, s: Serve) -> str:
    """The policy the decode server's flags realize (module docstring)."""
    policy = _vllm_policy(b, s) if s.stack == "vllm" else _sglang_policy(b, s)
    b.set("policy", policy)
    return policy


def _vllm_policy(b: Build, s: Serve) -> str:
    names = connectors(s.get("kv_transfer", {}))
    offload = any(n in OFFLOAD_CONNECTORS for n in names)
    cache = s.get("prefix_cache", True)
    policy = ("replicate_tiered" if offload else "replicate_all_lru") if cache else (
        "transfer_per_request")  # fmt: skip
    flag = s.flag("prefix_cache") or "(vLLM default: --enable-prefix-caching)"
    b.row(s, flag, f"policy = {policy}")
    host = offload_bytes(s.get("kv_transfer", {}))
    if offload and host is not None:
        b.set("memory.host_kv_gb", round(host / 1e9, 6))
        b.row(s, "(OffloadingConnector cpu_bytes_to_use)", "memory.host_kv_gb", MAPPED,
              f"{host / 1e9:g} GB per instance")  # fmt: skip
    if offload and not cache:
        b.row(s, s.flag("kv_transfer"), "–", APPROX,
              "a CPU offloading connector without the prefix cache keeps nothing to reuse; "
              "simulated as transfer_per_request")  # fmt: skip
    return policy


def _sglang_policy(b: Build, s: Serve) -> str:
    radix, hicache = s.get("decode_radix", False), s.get("hicache", False)
    if radix and s.get("no_radix"):
        raise ScenarioError("--disable-radix-cache and --disaggregation-decode-enable-radix-cache "
                            "contradict", where="--decode", fix="keep one of the two flags")  # fmt: skip
    policy = ("replicate_tiered" if hicache else "replicate_all_lru") if radix else (
        "transfer_per_request")  # fmt: skip
    flag = s.flag("decode_radix") or "(SGLang default: no radix cache on a decode server)"
    b.row(s, flag, f"policy = {policy}")
    if hicache:
        status = MAPPED if radix else APPROX
        note = (
            ""
            if radix
            else (
                "without --disaggregation-decode-enable-radix-cache the host "
                "tier has nothing to match; simulated as transfer_per_request"
            )
        )
        b.row(s, s.flag("hicache"), "policy = replicate_tiered" if radix else "–", status, note)
    _hicache_policy(b, s)
    return policy


def _hicache_policy(b: Build, s: Serve) -> None:
    if "hicache_policy" not in s.values:
        return
    value = s.get("hicache_policy")
    if value == MODELLED_WRITE_POLICY:
        b.row(s, s.flag("hicache_policy"), "– (the modelled demotion)", NO_EFFECT,
              "blocks are copied to host memory when HBM evicts them")  # fmt: skip
    else:
        b.row(s, s.flag("hicache_policy"), "–", APPROX,
              f"{value} also copies blocks to host memory as they are written; modelled as "
              "write_back (a copy at eviction), so host-path traffic is understated")  # fmt: skip


def apply_host_pool(b: Build, s: Serve, kv_budget_gb: float | None) -> None:
    """--hicache-size (GB per rank) or --hicache-ratio (× the HBM KV pool) → memory.host_kv_gb."""
    if "hicache_size" in s.values:
        gb = s.get("hicache_size") * s.get("tp", 1) * s.get("pp", 1)
        b.set("memory.host_kv_gb", round(gb, 6))
        b.row(
            s,
            s.flag("hicache_size"),
            "memory.host_kv_gb",
            MAPPED,
            f"{gb:g} GB: the size per rank × {s.get('tp', 1) * s.get('pp', 1)} ranks",
        )
        return
    if "hicache_ratio" not in s.values:
        return
    ratio = s.get("hicache_ratio")
    if kv_budget_gb is not None:
        b.set("memory.host_kv_gb", round(ratio * kv_budget_gb, 6))
        b.row(s, s.flag("hicache_ratio"), "memory.host_kv_gb", MAPPED,
              f"{ratio:g} × the {kv_budget_gb:.2f} GB HBM KV pool")  # fmt: skip
    elif ratio == 2:
        b.row(s, s.flag("hicache_ratio"), "memory.host_kv_gb (default: 2 × the HBM KV pool)")
    else:
        raise ScenarioError(
            f"--hicache-ratio {ratio:g} needs the size of the HBM KV pool",
            where="--decode",
            fix="give --mem-fraction-static too, or --hicache-size GB",
        )
