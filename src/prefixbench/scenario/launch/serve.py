"""`vllm serve` and SGLang `launch_server` flags, read into one stack-neutral ``Serve``.

The flag semantics are the stacks' own argument docs (docs/import.md lists each with its
source): vLLM's engine arguments (docs.vllm.ai, "Engine Arguments"; vllm/engine/arg_utils.py)
and SGLang's server arguments (docs.sglang.io, "Server Arguments";
python/sglang/srt/server_args.py). Every flag ends up in ``Serve.values`` (a setting
prefixbench models, by a neutral key) or in ``Serve.rows`` (no effect, not modelled, or
unknown, with the reason), so nothing is silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from prefixbench.errors import ScenarioError

from .cmdline import Command, Flag, parse_command
from .rows import NO_EFFECT, NOT_MODELLED, UNKNOWN, Row

# neutral key -> (kind) ; kinds: int, float, str, switch, json
KINDS = {
    "model": "str", "tp": "int", "pp": "int", "dp": "int", "mem": "float",
    "kv_dtype": "str", "block": "int", "max_seqs": "int", "max_batched": "int",
    "prefix_cache": "switch", "chunked": "switch", "kv_transfer": "json", "spec": "json",
    "quant": "str", "disagg_mode": "str", "backend": "str", "decode_radix": "switch",
    "hicache": "switch", "hicache_ratio": "float", "hicache_size": "float",
    "hicache_policy": "str", "spec_algo": "str", "spec_steps": "int", "spec_tokens": "int",
    "spec_draft": "str", "no_radix": "switch",
}  # fmt: skip

# canonical flag -> neutral key, per stack (aliases map to the canonical flag)
VLLM_FLAGS = {
    "--model": "model",
    "--tensor-parallel-size": "tp",
    "--pipeline-parallel-size": "pp",
    "--data-parallel-size": "dp",
    "--gpu-memory-utilization": "mem",
    "--kv-cache-dtype": "kv_dtype",
    "--block-size": "block",
    "--max-num-seqs": "max_seqs",
    "--max-num-batched-tokens": "max_batched",
    "--enable-prefix-caching": "prefix_cache",
    "--enable-chunked-prefill": "chunked",
    "--kv-transfer-config": "kv_transfer",
    "--speculative-config": "spec",
    "--quantization": "quant",
}
VLLM_ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size",
                "-dp": "--data-parallel-size", "-q": "--quantization"}  # fmt: skip

SGLANG_FLAGS = {
    "--model-path": "model",
    "--tp-size": "tp",
    "--pp-size": "pp",
    "--dp-size": "dp",
    "--mem-fraction-static": "mem",
    "--kv-cache-dtype": "kv_dtype",
    "--page-size": "block",
    "--max-running-requests": "max_seqs",
    "--chunked-prefill-size": "max_batched",
    "--disaggregation-mode": "disagg_mode",
    "--disaggregation-transfer-backend": "backend",
    "--disaggregation-decode-enable-radix-cache": "decode_radix",
    "--enable-hierarchical-cache": "hicache",
    "--hicache-ratio": "hicache_ratio",
    "--hicache-size": "hicache_size",
    "--hicache-write-policy": "hicache_policy",
    "--speculative-algorithm": "spec_algo",
    "--speculative-num-steps": "spec_steps",
    "--speculative-num-draft-tokens": "spec_tokens",
    "--speculative-draft-model-path": "spec_draft",
    "--quantization": "quant",
    "--disable-radix-cache": "no_radix",
}
SGLANG_ALIASES = {"--model": "--model-path", "--tp": "--tp-size",
                  "--tensor-parallel-size": "--tp-size", "--dp": "--dp-size",
                  "--data-parallel-size": "--dp-size", "--pipeline-parallel-size": "--pp-size",
                  "--speculative-draft-model": "--speculative-draft-model-path"}  # fmt: skip

# flags that do not change performance (addresses, names, logging, auth, loading)
NO_EFFECT_FLAGS = frozenset({
    "--host", "--port", "--served-model-name", "--trust-remote-code", "--api-key",
    "--uvicorn-log-level", "--log-level", "--disable-log-requests", "--disable-log-stats",
    "--enable-log-requests", "--seed", "--tokenizer", "--revision", "--download-dir",
    "--load-format", "--tokenizer-mode", "--chat-template", "--enable-auto-tool-choice",
    "--tool-call-parser", "--reasoning-parser", "--uds", "--root-path", "--allowed-origins",
    "--disaggregation-ib-device", "--dist-init-addr", "--nnodes", "--node-rank",
    "--enable-metrics", "--skip-tokenizer-init", "--data-parallel-address",
    "--data-parallel-rpc-port", "--data-parallel-size-local", "--data-parallel-start-rank",
    "--headless", "--max-log-len", "--response-role", "--hf-token", "--config",
})  # fmt: skip

# flags that change performance in ways the simulation does not model: what they would change
NOT_MODELLED_FLAGS = {
    "--max-model-len": "caps a request's prompt + output; the simulation allows the model's "
    "whole context",
    "--context-length": "caps a request's prompt + output; the simulation allows the model's "
    "whole context",
    "--enforce-eager": "turns CUDA graphs off (slower small decode steps)",
    "--disable-cuda-graph": "turns CUDA graphs off (slower small decode steps)",
    "--cuda-graph-max-bs": "sizes the CUDA-graph batches (step launch overhead)",
    "--swap-space": "sizes the CPU swap space (memory.preemption: swap models it by the host path)",
    "--cpu-offload-gb": "offloads weights to CPU memory (slower steps)",
    "--enable-expert-parallel": "shards MoE experts across the instance's GPUs (set "
    "cluster.ROLE.ep by hand)",
    "--ep-size": "shards MoE experts across the instance's GPUs (set cluster.ROLE.ep by hand)",
    "--enable-dp-attention": "data-parallel attention inside one MoE instance",
    "--max-total-tokens": "caps the KV pool in tokens (set memory.kv_budget_gb by hand)",
    "--kv-cache-memory-bytes": "sizes the KV pool in bytes (set memory.kv_budget_gb by hand)",
    "--long-prefill-token-threshold": "splits long prefills into partial steps",
    "--max-num-partial-prefills": "runs several partial prefills per step",
    "--schedule-policy": "reorders the waiting queue (the simulation serves FCFS)",
    "--scheduling-policy": "reorders the waiting queue (the simulation serves FCFS)",
    "--num-gpu-blocks-override": "sizes the KV pool in blocks (set memory.kv_budget_gb by hand)",
    "--dtype": "the compute dtype (a 16-bit dtype is what the model assumes)",
    "--hicache-io-backend": "the host<->GPU copy kernel (cluster.decode.host_path sets its speed)",
    "--hicache-storage-backend": "a third, storage tier under host memory",
    "--hicache-mem-layout": "the host pool's memory layout",
    "--speculative-eagle-topk": "a tree of draft tokens (the model is a chain, top-k 1)",
    "--speculative-draft-model-revision": "the draft's revision",
}


@dataclass
class Serve:
    stack: str
    role: str  # prefill, decode or serve
    values: dict[str, tuple[Any, Flag]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values[key][0] if key in self.values else default

    def flag(self, key: str) -> str:
        return self.values[key][1].text() if key in self.values else ""


def _tables(stack: str) -> tuple[dict[str, str], dict[str, str]]:
    return (VLLM_FLAGS, VLLM_ALIASES) if stack == "vllm" else (SGLANG_FLAGS, SGLANG_ALIASES)


def _switch_names() -> set[str]:
    keys = {k for k, kind in KINDS.items() if kind == "switch"}
    names = {f for t in (VLLM_FLAGS, SGLANG_FLAGS) for f, k in t.items() if k in keys}
    return names | {"--trust-remote-code", "--enforce-eager", "--disable-log-requests",
                    "--disable-log-stats", "--enable-expert-parallel", "--disable-cuda-graph",
                    "--enable-dp-attention", "--headless", "--enable-metrics",
                    "--skip-tokenizer-init", "--enable-log-requests",
                    "--enable-auto-tool-choice"}  # fmt: skip


def _valued_names() -> set[str]:
    keys = {k for k, kind in KINDS.items() if kind != "switch"}
    return {f for t in (VLLM_FLAGS, SGLANG_FLAGS) for f, k in t.items() if k in keys}


def parse_serve(text: str, role: str) -> Serve:
    """A serving command line read into a ``Serve`` (``role``: prefill, decode or serve)."""
    where = f"--{role}"
    aliases = {"vllm": VLLM_ALIASES, "sglang": SGLANG_ALIASES}
    cmd = parse_command(text, where, aliases, _switch_names(), _valued_names())
    if cmd.stack == "vllm-bench":
        raise ScenarioError(
            "this is a `vllm bench serve` command", where=where, fix="give it with --bench"
        )
    s = Serve(stack=cmd.stack, role=role)
    _positional_model(cmd, s, where)
    table, _ = _tables(cmd.stack)
    for flag in cmd.flags:
        _read_flag(s, flag, table, where)
    return s


def _positional_model(cmd: Command, s: Serve, where: str) -> None:
    if cmd.positionals:
        s.values["model"] = (cmd.positionals[0], Flag("--model", cmd.positionals[0], "MODEL"))
    if len(cmd.positionals) > 1:
        raise ScenarioError(
            f"unexpected words: {' '.join(cmd.positionals[1:])}",
            where=where,
            fix="give flags as --name value (a value starting with - needs --name=value)",
        )


def _read_flag(s: Serve, flag: Flag, table: dict[str, str], where: str) -> None:
    key = table.get(flag.name)
    if key is not None:
        s.values[key] = (_value(flag, KINDS[key], where), flag)
    elif flag.name in NO_EFFECT_FLAGS:
        s.rows.append(Row(s.role, flag.text(), "–", NO_EFFECT, "does not change performance"))
    elif flag.name in NOT_MODELLED_FLAGS:
        note = f"would change: {NOT_MODELLED_FLAGS[flag.name]}"
        s.rows.append(Row(s.role, flag.text(), "–", NOT_MODELLED, note))
    else:
        note = (f"not a {s.stack} flag prefixbench knows: not simulated; check whether it "
                "changes performance")  # fmt: skip
        s.rows.append(Row(s.role, flag.text(), "–", UNKNOWN, note))


_SUFFIX = {"k": 1e3, "K": 1024, "m": 1e6, "M": 1 << 20, "g": 1e9, "G": 1 << 30}


def _value(flag: Flag, kind: str, where: str) -> Any:
    """A flag's value as its kind: vLLM's human-readable integers (8k, 32K) read too."""
    if kind == "switch":
        if flag.value is not None and flag.value.lower() not in ("true", "false", "1", "0"):
            raise _bad(flag, "a switch (no value, or --no-… to turn it off)", where)
        off = flag.negated or (flag.value is not None and flag.value.lower() in ("false", "0"))
        return not off
    if flag.value is None:
        raise _bad(flag, "a value", where)
    text = flag.value
    try:
        if kind == "int":
            if text[-1:] in _SUFFIX:
                return int(float(text[:-1]) * _SUFFIX[text[-1]])
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "json":
            parsed = json.loads(text)
            if not isinstance(parsed, dict):
                raise ValueError
            return parsed
    except (ValueError, json.JSONDecodeError):
        raise _bad(flag, {"int": "an integer", "float": "a number",
                          "json": "a JSON object"}[kind], where) from None  # fmt: skip
    return text


def _bad(flag: Flag, want: str, where: str) -> ScenarioError:
    return ScenarioError(
        f"{flag.given} {flag.value or ''}".strip() + f" is not {want}",
        where=where,
        fix=f"give {flag.given} {want}",
    )
