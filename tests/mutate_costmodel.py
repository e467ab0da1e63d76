"""Mutation check of the reference tests: multiply one term of costmodel.py by a factor,
run the reference tests, restore the file. Not a test; run by hand:

    .venv/bin/python tests/mutate_costmodel.py [FACTOR ...]     # default: 4 1.1
    MUT_ONLY=decode .venv/bin/python tests/mutate_costmodel.py 4   # terms whose name has "decode"

Prints one line per mutation: the term, the factor and the tests that failed (``SURVIVED``
if none did). Each mutation is a textual edit of src/prefixbench/physics/costmodel.py; the file is
restored after every run (and at exit).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = ROOT / "src" / "prefixbench" / "physics" / "costmodel.py"

# (term, exact text in costmodel.py, the same with {F} where the factor goes)
MUTATIONS = [
    (
        "attention FLOP coefficient",
        "return 2.0 * m.layers * m.heads * (qk + v)",
        "return {F} * 2.0 * m.layers * m.heads * (qk + v)",
    ),
    (
        "linear FLOPs per token",
        'return 2.0 * (p["body"] + p["active_experts"])',
        'return {F} * 2.0 * (p["body"] + p["active_experts"])',
    ),
    (
        "LM-head FLOPs",
        "return 2.0 * m.vocab_size * m.hidden_size",
        "return {F} * 2.0 * m.vocab_size * m.hidden_size",
    ),
    (
        "KV bytes/token (GQA)",
        "return int(round(2 * m.layers * m.kv_heads * m.head_dim * m.kv_bytes))",
        "return int(round({F} * 2 * m.layers * m.kv_heads * m.head_dim * m.kv_bytes))",
    ),
    (
        "KV bytes/token (MLA)",
        "return int(round(m.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes))",
        "return int(round({F} * m.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes))",
    ),
    (
        "weight bytes (weight_bytes)",
        'return param_counts(m)["total"] * m.weight_bytes',
        'return {F} * param_counts(m)["total"] * m.weight_bytes',
    ),
    (
        "dense weights read per step",
        "weights=weight_bytes(m) - expert_bytes,",
        "weights={F} * (weight_bytes(m) - expert_bytes),",
    ),
    (
        "routed-expert weight bytes",
        "expert_weights=expert_bytes,",
        "expert_weights={F} * expert_bytes,",
    ),
    (
        "expert-touch fraction k/E",
        "expert_frac=(m.experts_per_token / m.n_routed_experts) if m.is_moe else 0.0,",
        "expert_frac={F} * (m.experts_per_token / m.n_routed_experts) if m.is_moe else 0.0,",
    ),
    (
        "MFU prefill applied",
        "flops_rate_prefill=dev.peak_tflops * 1e12 * devices * eff.mfu_prefill,",
        "flops_rate_prefill={F} * dev.peak_tflops * 1e12 * devices * eff.mfu_prefill,",
    ),
    (
        "MFU decode applied",
        "flops_rate_decode=dev.peak_tflops * 1e12 * devices * eff.mfu_decode,",
        "flops_rate_decode={F} * dev.peak_tflops * 1e12 * devices * eff.mfu_decode,",
    ),
    (
        "MBU applied",
        "byte_rate=dev.hbm_gbps * 1e9 * devices * eff.mbu,",
        "byte_rate={F} * dev.hbm_gbps * 1e9 * devices * eff.mbu,",
    ),
    (
        "prefill overhead",
        "prefill_overhead=eff.prefill_overhead_ms / 1e3,",
        "prefill_overhead={F} * eff.prefill_overhead_ms / 1e3,",
    ),
    (
        "decode overhead",
        "decode_overhead=eff.decode_overhead_ms / 1e3,",
        "decode_overhead={F} * eff.decode_overhead_ms / 1e3,",
    ),
    (
        "instance memory",
        "memory_bytes=dev.memory_gb * 1e9 * devices,",
        "memory_bytes={F} * dev.memory_gb * 1e9 * devices,",
    ),
    ("q_proj params", "q = h * n * m.head_dim\n", "q = {F} * h * n * m.head_dim\n"),
    (
        "k/v_proj params",
        "kv = 2 * h * m.kv_heads * m.head_dim",
        "kv = {F} * 2 * h * m.kv_heads * m.head_dim",
    ),
    ("o_proj params", "o = n * m.head_dim * h", "o = {F} * n * m.head_dim * h"),
    (
        "QKV bias params",
        "bias = (n + 2 * m.kv_heads) * m.head_dim if m.qkv_bias else 0",
        "bias = {F} * (n + 2 * m.kv_heads) * m.head_dim if m.qkv_bias else 0",
    ),
    ("MLA attention params", "return q + kv_a + kv_b + o", "return {F} * (q + kv_a + kv_b + o)"),
    (
        "MLA q_lora params",
        "h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk",
        "{F} * (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk)",
    ),
    (
        "dense MLP params",
        "dense_layer = 3 * h * m.intermediate_size",
        "dense_layer = {F} * 3 * h * m.intermediate_size",
    ),
    (
        "expert MLP params",
        "expert = 3 * h * m.moe_intermediate_size",
        "expert = {F} * 3 * h * m.moe_intermediate_size",
    ),
    (
        "shared experts + router params",
        "m.n_shared_experts * expert + h * m.n_routed_experts",
        "{F} * (m.n_shared_experts * expert + h * m.n_routed_experts)",
    ),
    (
        "active experts params",
        "moe_layers * m.experts_per_token * expert,",
        "{F} * moe_layers * m.experts_per_token * expert,",
    ),
    (
        "norm params",
        "norms = m.layers * 2 * m.hidden_size + m.hidden_size",
        "norms = {F} * (m.layers * 2 * m.hidden_size + m.hidden_size)",
    ),
    (
        "embedding params",
        "embed = m.vocab_size * m.hidden_size",
        "embed = {F} * m.vocab_size * m.hidden_size",
    ),
    (
        "untied LM-head params",
        "head = 0 if m.tied_embeddings else embed",
        "head = 0 if m.tied_embeddings else {F} * embed",
    ),
    (
        "W(B) touched experts (weights_read)",
        "touched = 1.0 - (1.0 - self.expert_frac) ** np.asarray(batch, dtype=np.float64)",
        "touched = {F} * (1.0 - (1.0 - self.expert_frac) ** np.asarray(batch, dtype=np.float64))",
    ),
    (
        "decode series a1 (FLOP term)",
        "a1 = (batch * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * context0) / fr",
        "a1 = {F} * (batch * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * context0) / fr",
    ),
    (
        "decode series s1 (attention growth)",
        "s1 = cost.attn_coef * batch / fr",
        "s1 = {F} * cost.attn_coef * batch / fr",
    ),
    (
        "decode series a2 (byte term)",
        "a2 = (float(cost.weights_read(batch)) + cost.kv_bpt * context0) / br",
        "a2 = {F} * (float(cost.weights_read(batch)) + cost.kv_bpt * context0) / br",
    ),
    (
        "decode series s2 (KV growth)",
        "s2 = cost.kv_bpt * batch / br",
        "s2 = {F} * cost.kv_bpt * batch / br",
    ),
    (
        "decode series overhead",
        "return a1, s1, a2, s2, cost.decode_overhead",
        "return a1, s1, a2, s2, {F} * cost.decode_overhead",
    ),
    # step-time functions off the engine path (crossover, reference demand, analytics)
    (
        "prefill_parts attention term",
        "+ self.attn_coef * (n * c + n * (n + 1.0) / 2.0)",
        "+ {F} * self.attn_coef * (n * c + n * (n + 1.0) / 2.0)",
    ),
    (
        "prefill_parts LM head",
        "+ requests * self.lm_head_flops",
        "+ {F} * requests * self.lm_head_flops",
    ),
    (
        "prefill_parts KV bytes",
        "kv_io = self.kv_bpt * (n + c)",
        "kv_io = {F} * self.kv_bpt * (n + c)",
    ),
    (
        "prefill_time weights read",
        "t_memory = (cost.weights_read(n.sum()) + kv_io.sum())",
        "t_memory = ({F} * cost.weights_read(n.sum()) + kv_io.sum())",
    ),
    (
        "recompute_time FLOPs",
        "flops = n * cost.linear_flops + cost.attn_coef * n * (n + 1.0) / 2.0",
        "flops = {F} * (n * cost.linear_flops + cost.attn_coef * n * (n + 1.0) / 2.0)",
    ),
    (
        "recompute_time bytes",
        "(cost.weights_read(n) + cost.kv_bpt * n) / cost.byte_rate",
        "{F} * (cost.weights_read(n) + cost.kv_bpt * n) / cost.byte_rate",
    ),
    (
        "decode_iteration_time FLOPs",
        "flops = b * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx",
        "flops = {F} * (b * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx)",
    ),
    (
        "decode_iteration_time bytes",
        "byts = cost.weights_read(b) + cost.kv_bpt * ctx",
        "byts = {F} * (cost.weights_read(b) + cost.kv_bpt * ctx)",
    ),
    (
        "transfer_time bytes/bandwidth",
        "b / (link.bandwidth_gbps * 1e9)",
        "{F} * b / (link.bandwidth_gbps * 1e9)",
    ),
    (
        "closed-form series sum",
        "return n * a + s * (j0 + j1 - 1) * n / 2.0",
        "return n * a + {F} * s * (j0 + j1 - 1) * n / 2.0",
    ),
]


def run_tests() -> list[str]:
    env = dict(os.environ, REFSIM_MUTATION="1")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-seed=0",
            "-rf",
            "tests/test_engine_reference.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    return sorted(
        {
            line.split("::")[1].split(" ")[0].split("[")[0]
            for line in out.splitlines()
            if line.startswith("FAILED ")
        }
    )


def main(factors: list[str]) -> None:
    original = TARGET.read_text()
    try:
        only = os.environ.get("MUT_ONLY", "")
        for name, old, new in MUTATIONS:
            if only and only not in name:
                continue
            assert original.count(old) == 1, f"{name}: {old!r} not found exactly once"
            for f in factors:
                TARGET.write_text(original.replace(old, new.format(F=f)))
                failed = run_tests()
                print(f"x{f:<4} {name:<38} {', '.join(failed) or 'SURVIVED'}", flush=True)
                TARGET.write_text(original)
    finally:
        TARGET.write_text(original)


if __name__ == "__main__":
    main(sys.argv[1:] or ["4", "1.1"])
