"""A scenario (and a policy) written back as launch commands: the answer in the stack's terms.

``policy_flags`` gives the flags that realize a policy (``registry/launch_flags.py``);
``serve_commands`` whole ``vllm serve`` / SGLang commands for a scenario's prefill and
decode servers, the inverse of the import (docs/import.md: the memory share is the
inverse of the import's formula, f = (KV pool + weights) / HBM).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from prefixbench.registry.launch_flags import STACK_FLAGS

STACKS = ("vllm", "sglang")
SGLANG_KV = {"fp8": "fp8_e4m3", "bf16": "bf16", "fp16": "fp16"}
VLLM_KV = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
WEIGHTS = {"fp8": "fp8", "int4": "awq", "int8": "w8a8_int8"}


@dataclass
class Answer:
    """A policy in one stack's terms: per role the flags, or None and a note."""

    policy: str
    stack: str
    flags: dict[str, list[str]] | None  # role -> words
    note: str = ""

    def lines(self) -> list[str]:
        if self.flags is None:
            return [f"{self.stack}: no equivalent of {self.policy}: {self.note}"]
        if not self.flags:
            return [f"{self.stack}: {self.note}"]
        return [f"{role}: {shlex.join(words)}" for role, words in self.flags.items() if words]


def policy_flags(policy: str, stack: str, host: float | None = None) -> Answer:
    """The flags that realize ``policy`` on ``stack`` (vllm, sglang or dynamo)."""
    entry = STACK_FLAGS[policy]
    if stack == "dynamo":
        text = entry.get("dynamo")
        if not text:
            return Answer(policy, stack, None, "its conditional disaggregation does not apply")
        return Answer(policy, stack, {}, text)
    flags = entry.get(stack)
    if flags is None:
        return Answer(policy, stack, None, entry["note"])
    filled = {role: [_fill(w, stack, host) for w in words] for role, words in flags.items()}
    note = entry["note"]
    if host is None and stack == "vllm" and any("{host}" in w for ws in flags.values() for w in ws):
        note = "BYTES: the host KV pool per decode instance in bytes (prefixbench's default "
        note += "is twice the decode KV pool, as SGLang's --hicache-ratio 2)"
    return Answer(policy, stack, filled, note)


def _fill(word: str, stack: str, host: float | None) -> str:
    if "{host}" not in word:
        return word
    if stack == "vllm":
        value = f"{int(round((host or 0) * 1e9))}" if host is not None else "BYTES"
    else:
        value = f"{host:g}" if host is not None else "2"
    return word.replace("{host}", value)


def _hf(model: str) -> str:
    from prefixbench.catalog import MODELS

    spec = MODELS.get(model)
    return spec.hf_id if spec is not None and spec.hf_id else model


def _memory_share(s, role: str) -> float | None:
    """The inverse of the import's memory formula (resources.py), or None if not set."""
    from prefixbench import catalog
    from prefixbench.catalog.formats import with_formats
    from prefixbench.physics.costmodel import weight_bytes

    g = s.cluster.prefill if role == "prefill" else s.cluster.decode
    total = catalog.get_accelerator(g.accelerator).memory_gb * g.devices
    fmt = s.model_format
    weights = (
        weight_bytes(with_formats(catalog.get_model(s.model), fmt.kv_dtype, fmt.weights)) / 1e9
    )
    if role == "prefill":
        frac = s.cluster.prefill_cache_fraction
        if "prefill_cache_fraction" not in s.cluster.model_fields_set or frac == 0:
            return None
        return (frac * (total - weights) + weights) / total
    if s.memory.gpu_memory_utilization is not None:
        return s.memory.gpu_memory_utilization
    pool = s.memory.kv_budget_gb
    return None if pool is None else (pool + weights) / total


def host_pool(s) -> float | None:
    """The host pool the tiered flags need: vLLM bytes (GB here), SGLang the ratio."""
    return s.memory.host_kv_gb


def _set(model, name: str):
    return getattr(model, name) if name in model.model_fields_set else None


def _opt(words: list[str], flag: str, value) -> None:
    if value is not None:
        words += [flag, f"{value:.4g}" if isinstance(value, float) else str(value)]


# The flags both stacks take, by what they set (vLLM's name, SGLang's name).
_SHARED = {
    "tp": ("--tensor-parallel-size", "--tp-size"),
    "pp": ("--pipeline-parallel-size", "--pp-size"),
    "dp": ("--data-parallel-size", "--dp-size"),
    "memory": ("--gpu-memory-utilization", "--mem-fraction-static"),
    "kv_dtype": ("--kv-cache-dtype", "--kv-cache-dtype"),
    "quantization": ("--quantization", "--quantization"),
    "block": ("--block-size", "--page-size"),
    "batched_tokens": ("--max-num-batched-tokens", "--chunked-prefill-size"),
    "max_seqs": ("--max-num-seqs", "--max-running-requests"),
    "no_prefix_cache": ("--no-enable-prefix-caching", "--disable-radix-cache"),
}


def _shared_words(w: list[str], s, role: str, stack: int) -> None:
    """The flags both stacks share, under ``stack``'s names (0 vLLM, 1 SGLang)."""
    c, g = s.cluster, (s.cluster.prefill if role == "prefill" else s.cluster.decode)
    kv = (VLLM_KV, SGLANG_KV)[stack]

    def flag(what: str, value) -> None:
        _opt(w, _SHARED[what][stack], value)

    flag("tp", _set(g, "tp"))
    flag("pp", g.pp if g.pp > 1 else None)
    n = c.prefill_instances if role == "prefill" else c.decode_instances
    flag("dp", n if n > 1 else None)
    flag("memory", _memory_share(s, role))
    flag("kv_dtype", kv.get(s.model_format.kv_dtype or ""))
    flag("quantization", WEIGHTS.get(s.model_format.weights or ""))
    flag("block", _set(c, "block_size"))
    if role == "prefill":
        flag("batched_tokens", _set(c, "prefill_token_budget"))
        if c.prefill_cache_fraction == 0:
            w.append(_SHARED["no_prefix_cache"][stack])
    else:
        flag("max_seqs", _set(c, "max_decode_batch"))
        flag("batched_tokens", _set(c, "chunk_token_budget"))


def _vllm_words(s, role: str) -> list[str]:
    g = s.cluster.prefill if role == "prefill" else s.cluster.decode
    w = ["vllm", "serve", _hf(s.model)]
    _shared_words(w, s, role, 0)
    if role == "decode":
        sp = g.speculative
        if sp is not None:
            cfg = {"method": "mtp"} if sp.method == "mtp" else {
                "method": "draft_model", "model": _hf(sp.draft_model)}  # fmt: skip
            cfg["num_speculative_tokens"] = sp.gamma
            w += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return w


def _sglang_words(s, role: str) -> list[str]:
    g = s.cluster.prefill if role == "prefill" else s.cluster.decode
    w = ["python", "-m", "sglang.launch_server", "--model-path", _hf(s.model)]
    _shared_words(w, s, role, 1)
    if role == "decode":
        sp = g.speculative
        if sp is not None:
            w += ["--speculative-algorithm", "NEXTN" if sp.method == "mtp" else "STANDALONE"]
            if sp.method == "draft":
                w += ["--speculative-draft-model-path", _hf(sp.draft_model)]
            w += ["--speculative-num-steps", str(sp.gamma)]
    return w


def serve_commands(s, policy: str, stack: str, kv_budget_gb: float | None = None) -> Answer:
    """Whole prefill and decode commands on ``stack`` running scenario ``s`` under ``policy``
    (``kv_budget_gb``: the run's decode KV pool, sizing a tiered policy's host pool)."""
    words = {"vllm": _vllm_words, "sglang": _sglang_words}[stack]
    if s.cluster.mode == "colocated":
        return Answer(policy, stack, {"serve": words(s, "decode")},
                      "colocated: the hand-off policy does not apply")  # fmt: skip
    answer = policy_flags(policy, stack, _host_value(s, stack, kv_budget_gb))
    if answer.flags is None:
        return answer
    _host_size(s, stack, kv_budget_gb, answer.flags)
    return Answer(policy, stack, {role: words(s, role) + extra
                                  for role, extra in answer.flags.items()}, answer.note)  # fmt: skip


def _host_size(s, stack: str, kv_budget_gb: float | None, flags: dict) -> None:
    """SGLang with a host pool in GB but no known HBM pool: --hicache-size (GB per rank)."""
    words = flags.get("decode", [])
    if stack != "sglang" or "--hicache-ratio" not in words or s.memory.host_kv_gb is None:
        return
    if pool_gb(s) or kv_budget_gb:
        return
    i = words.index("--hicache-ratio")
    ranks = (s.cluster.decode.tp_degree()) * s.cluster.decode.pp
    words[i : i + 2] = ["--hicache-size", f"{s.memory.host_kv_gb / ranks:.4g}"]


def pool_gb(s) -> float | None:
    """The decode KV pool per instance in GB when the scenario sizes it in memory terms
    (memory.kv_budget_gb, or memory.gpu_memory_utilization as the runner sizes it)."""
    from prefixbench import catalog
    from prefixbench.catalog.formats import with_formats
    from prefixbench.physics.costmodel import weight_bytes
    from prefixbench.physics.sizing import activation_reserve_bytes, kv_pool_bytes

    m, c = s.memory, s.cluster
    if m.kv_budget_gb is not None or m.gpu_memory_utilization is None:
        return m.kv_budget_gb
    spec = with_formats(catalog.get_model(s.model), s.model_format.kv_dtype, s.model_format.weights)
    hbm = catalog.get_accelerator(c.decode.accelerator).memory_gb * 1e9 * c.decode.devices
    reserve = activation_reserve_bytes(spec, c.decode.tp_degree(), c.chunk_token_budget,
                                       c.max_decode_batch)  # fmt: skip
    pool = kv_pool_bytes(
        m.gpu_memory_utilization, hbm, weight_bytes(spec), reserve, c.decode.devices
    )
    return pool / 1e9


def _host_value(s, stack: str, kv_budget_gb: float | None) -> float | None:
    """vLLM: the host pool in GB (bytes once filled); SGLang: its ratio to the HBM pool."""
    pool = pool_gb(s) or kv_budget_gb
    host = s.memory.host_kv_gb
    if stack == "vllm":
        return host if host is not None else (2 * pool if pool else None)
    return host / pool if host is not None and pool else 2.0
