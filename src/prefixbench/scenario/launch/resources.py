"""The model, its memory share and speculative decoding, from the serving flags.

Memory (docs/import.md, "Memory"): vLLM's ``--gpu-memory-utilization f`` and SGLang's
``--mem-fraction-static f`` both give the share of each GPU's memory the engine takes for
weights plus the KV pool (vLLM: vllm/v1/worker/gpu_worker.py ``determine_available_memory``;
SGLang: python/sglang/srt/model_executor/model_runner.py ``profile_max_num_token``). So the
KV pool of an instance is

    KV pool = f × (HBM per device × devices) − weight bytes − activation reserve

On a decode (or colocated) server ``f`` is ``memory.gpu_memory_utilization``, which the
runner sizes this way with an estimated activation reserve (physics/sizing.py; docs/model.md,
"Memory in GB"). On a prefill server the pool's share of the memory left after weights is
``cluster.prefill_cache_fraction``, an upper bound (no activation reserve is taken there).
"""

from __future__ import annotations

from prefixbench.errors import ScenarioError

from .deploy import DRAFT_METHODS, MTP_METHODS, Build
from .rows import APPROX, MAPPED, NO_EFFECT
from .serve import Serve


def scenario_model(b: Build, serves: list[Serve]) -> str:
    """One model for every role: a catalog name where the id is a catalog model's."""
    from prefixbench.catalog.hub import catalog_name, looks_like_hf_id

    given = {s.role: s.get("model") for s in serves if s.get("model")}
    if not given:
        raise ScenarioError("no model in the serving commands", where="--prefill/--decode",
                            fix="give the model: `vllm serve MODEL` or --model-path MODEL")  # fmt: skip
    if len(set(given.values())) > 1:
        raise ScenarioError(f"the roles serve different models ({given})",
                            where="--prefill/--decode", fix="give the same model to both")  # fmt: skip
    model = next(iter(given.values()))
    preset = catalog_name(model) if looks_like_hf_id(model) else None
    b.set("model", model)
    for s in serves:
        if s.get("model"):
            b.row(s, s.flag("model"), "model" + (f" (catalog: {preset})" if preset else ""))
    return model


def weight_gb(b: Build) -> float:
    """The model's weights in GB, in the imported format (whole model per instance)."""
    from prefixbench import catalog
    from prefixbench.catalog.formats import with_formats
    from prefixbench.physics.costmodel import weight_bytes

    fmt = b.get("model_format", {}) or {}
    spec = with_formats(catalog.get_model(b.get("model")), fmt.get("kv_dtype"), fmt.get("weights"))
    return weight_bytes(spec) / 1e9


def hbm_gb(b: Build, s: Serve) -> float:
    from prefixbench import catalog

    group = "prefill" if s.role == "prefill" else "decode"
    acc = b.get(f"cluster.{group}.accelerator", "l4")
    return catalog.get_accelerator(acc).memory_gb * b.get(f"cluster.{group}.devices", 1)


def decode_pool_gb(b: Build, s: Serve, f: float) -> tuple[float, float]:
    """The decode KV pool at share ``f`` as the runner sizes memory.gpu_memory_utilization
    (physics/sizing.py: HBM share − weights − the activation reserve per device), and that
    reserve, both GB."""
    from prefixbench import catalog
    from prefixbench.catalog.formats import with_formats
    from prefixbench.physics.sizing import activation_reserve_bytes, kv_pool_bytes
    from prefixbench.scenario.models import ClusterSpec

    fields = ClusterSpec.model_fields
    fmt = b.get("model_format", {}) or {}
    spec = with_formats(catalog.get_model(b.get("model")), fmt.get("kv_dtype"), fmt.get("weights"))
    step = b.get("cluster.chunk_token_budget", fields["chunk_token_budget"].default)
    batch = b.get("cluster.max_decode_batch", fields["max_decode_batch"].default)
    reserve = activation_reserve_bytes(spec, s.get("tp", 1), step, batch)
    devices = b.get("cluster.decode.devices", 1)
    pool = kv_pool_bytes(f, hbm_gb(b, s) * 1e9, weight_gb(b) * 1e9, reserve, devices)
    return pool / 1e9, reserve / 1e9


def apply_memory(b: Build, s: Serve) -> float | None:
    """The memory share → the KV pool (module docstring); the decode pool's GB, or None."""
    if "mem" not in s.values:
        return None
    f = s.get("mem")
    if not 0 < f <= 1:
        raise ScenarioError(
            f"{s.flag('mem')}: must be in (0, 1]",
            where=f"--{s.role}",
            fix="give a fraction of GPU memory above 0 and at most 1, e.g. 0.9",
        )
    total, weights = hbm_gb(b, s), weight_gb(b)
    if f * total - weights <= 0:
        raise ScenarioError(
            f"{s.flag('mem')}: {f:g} × {total:g} GB leaves no room after {weights:.1f} GB of "
            "weights",
            where=f"--{s.role}",
            fix="raise it, add devices (--tensor-parallel-size), or pick bigger --hardware",
        )
    if s.role == "prefill":
        pool = f * total - weights
        b.set("cluster.prefill_cache_fraction", round(pool / (total - weights), 6))
        b.row(s, s.flag("mem"), "cluster.prefill_cache_fraction", APPROX,
              f"{f:g} × {total:g} GB − {weights:.2f} GB weights = {pool:.2f} GB of prefix "
              "cache; an upper bound (the activation reserve is not sized on prefill)")  # fmt: skip
        return None
    pool, reserve = decode_pool_gb(b, s, f)
    b.set("memory.gpu_memory_utilization", f)
    b.row(s, s.flag("mem"), "memory.gpu_memory_utilization", MAPPED,
          f"KV pool ≈ {f:g} × {total:g} GB − {weights:.2f} GB weights − "
          f"{reserve * b.get('cluster.decode.devices', 1):.2f} GB activations = {pool:.2f} GB "
          '(docs/model.md, "Memory in GB")')  # fmt: skip
    return pool


def apply_speculative(b: Build, s: Serve) -> None:
    """--speculative-config (vLLM) / --speculative-algorithm … (SGLang) → decode.speculative."""
    keys = [k for k in ("spec", "spec_algo", "spec_steps", "spec_tokens", "spec_draft")
            if k in s.values]  # fmt: skip
    if not keys:
        return
    if s.role == "prefill":
        for k in keys:
            b.row(s, s.flag(k), "–", NO_EFFECT, "a prefill server makes one token per request")
        return
    if s.role == "serve":
        raise ScenarioError(
            "speculative decoding is simulated on disaggregated decode servers only",
            where="--serve", fix="import with --prefill and --decode, or drop the flag",
        )  # fmt: skip
    spec = _vllm_spec(s) if s.stack == "vllm" else _sglang_spec(s)
    b.set("cluster.decode.speculative", spec)
    for k in keys:
        b.row(s, s.flag(k), "cluster.decode.speculative")
    b.row(s, "(acceptance rate)", "cluster.decode.speculative.acceptance", APPROX,
          "not in a launch command: 0.7 assumed; set it to your measured rate")  # fmt: skip


def _vllm_spec(s: Serve) -> dict:
    cfg = s.get("spec")
    method = str(cfg.get("method") or ("draft_model" if cfg.get("model") else "")).lower()
    gamma = cfg.get("num_speculative_tokens")
    if not isinstance(gamma, int) or isinstance(gamma, bool):
        raise ScenarioError("--speculative-config needs num_speculative_tokens (an integer)",
                            where="--decode", fix='add "num_speculative_tokens": N to the --speculative-config JSON')  # fmt: skip
    if method in MTP_METHODS or method.endswith("_mtp"):
        return {"method": "mtp", "gamma": gamma}
    if method in DRAFT_METHODS and cfg.get("model"):
        return {"method": "draft", "draft_model": _draft_name(cfg["model"]), "gamma": gamma}
    raise _unmodelled_spec(method or "(none)")


def _sglang_spec(s: Serve) -> dict:
    algo = str(s.get("spec_algo", "")).lower()
    steps = s.get("spec_steps") or (s.get("spec_tokens") - 1 if s.get("spec_tokens") else None)
    if not steps:
        raise ScenarioError("give --speculative-num-steps (draft tokens per step)",
                            where="--decode", fix="add --speculative-num-steps N")  # fmt: skip
    if algo in MTP_METHODS:
        return {"method": "mtp", "gamma": steps}
    if algo in DRAFT_METHODS and s.get("spec_draft"):
        return {"method": "draft", "draft_model": _draft_name(s.get("spec_draft")), "gamma": steps}
    raise _unmodelled_spec(algo or "(none)")


def _draft_name(model: str) -> str:
    from prefixbench.catalog.hub import catalog_name, looks_like_hf_id

    return (catalog_name(model) if looks_like_hf_id(model) else None) or model


def _unmodelled_spec(method: str) -> ScenarioError:
    return ScenarioError(
        f"speculative method {method} is not modelled",
        where="--decode",
        fix="the simulation models a draft model (draft_model, EAGLE heads, STANDALONE: give "
        "its model) and MTP heads (mtp, deepseek_mtp, NEXTN)",
    )
