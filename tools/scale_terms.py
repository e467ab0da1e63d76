"""Multiply each term of costmodel.py by 1.1 in turn and check tests/test_costmodel.py fails.

A one-off check, not a CI step: `python tools/scale_terms.py` copies src/ and
tests/ to a temporary folder, edits one term at a time and runs the cost-model tests there.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]  # the repository
# (exact text in costmodel.py, replacement): one term ×1.1 each
TERMS = [
    (
        "m.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes",
        "1.1 * m.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes",
    ),
    (
        "2 * m.layers * m.kv_heads * m.head_dim * m.kv_bytes",
        "2.2 * m.layers * m.kv_heads * m.head_dim * m.kv_bytes",
    ),
    (
        "h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk",
        "1.1 * (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk)",
    ),
    ("            else h * n * qk", "            else 1.1 * h * n * qk"),
    (
        "kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank",
        "kv_a = 1.1 * (h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank)",
    ),
    ("kv_b = m.kv_lora_rank * n", "kv_b = 1.1 * m.kv_lora_rank * n"),
    ("o = n * m.v_head_dim * h", "o = 1.1 * n * m.v_head_dim * h"),
    ("q = h * n * m.head_dim", "q = 1.1 * h * n * m.head_dim"),
    ("kv = 2 * h * m.kv_heads * m.head_dim", "kv = 2.2 * h * m.kv_heads * m.head_dim"),
    ("o = n * m.head_dim * h", "o = 1.1 * n * m.head_dim * h"),
    (
        "bias = (n + 2 * m.kv_heads) * m.head_dim if",
        "bias = 1.1 * (n + 2 * m.kv_heads) * m.head_dim if",
    ),
    ("dense_layer = 3 * h * m.intermediate_size", "dense_layer = 3.3 * h * m.intermediate_size"),
    ("expert = 3 * h * m.moe_intermediate_size", "expert = 3.3 * h * m.moe_intermediate_size"),
    ("m.n_shared_experts * expert + h", "1.1 * m.n_shared_experts * expert + h"),
    ("+ h * m.n_routed_experts  #", "+ 1.1 * h * m.n_routed_experts  #"),
    (
        "dense = m.first_dense_layers * dense_layer",
        "dense = 1.1 * m.first_dense_layers * dense_layer",
    ),
    (
        "moe_layers * m.n_routed_experts * expert,",
        "1.1 * moe_layers * m.n_routed_experts * expert,",
    ),
    (
        "moe_layers * m.experts_per_token * expert,",
        "1.1 * moe_layers * m.experts_per_token * expert,",
    ),
    ("embed = m.vocab_size * m.hidden_size", "embed = 1.1 * m.vocab_size * m.hidden_size"),
    (
        "norms = m.layers * 2 * m.hidden_size + m.hidden_size",
        "norms = 1.1 * (m.layers * 2 * m.hidden_size + m.hidden_size)",
    ),
    (
        'return param_counts(m)["total"] * m.weight_bytes',
        'return 1.1 * param_counts(m)["total"] * m.weight_bytes',
    ),
    (
        'return 2.0 * (p["body"] + p["active_experts"])',
        'return 2.2 * (p["body"] + p["active_experts"])',
    ),
    (
        'return 2.0 * (p["body"] + p["active_experts"])',
        'return 2.0 * (p["body"] + 1.1 * p["active_experts"])',
    ),
    ("return 2.0 * m.vocab_size * m.hidden_size", "return 2.2 * m.vocab_size * m.hidden_size"),
    ("return 2.0 * m.layers * m.heads * (qk + v)", "return 2.2 * m.layers * m.heads * (qk + v)"),
    (
        "qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim",
        "qk, v = 1.1 * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.v_head_dim",
    ),
    (
        "qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim",
        "qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, 1.1 * m.v_head_dim",
    ),
    (
        "linear_flops_per_token(m) + lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)",
        "1.1 * linear_flops_per_token(m) + lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)",
    ),
    (
        "linear_flops_per_token(m) + lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)",
        "linear_flops_per_token(m) + 1.1 * lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)",
    ),
    (
        "linear_flops_per_token(m) + lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)",
        "linear_flops_per_token(m) + lm_head_flops(m) + 1.1 * attention_flops_coef(m) * np.asarray(context)",
    ),
    (
        "return dev.peak_tflops * 1e12 / (dev.hbm_gbps * 1e9)",
        "return 1.1 * dev.peak_tflops * 1e12 / (dev.hbm_gbps * 1e9)",
    ),
    ("flops_rate_prefill=dev.peak_tflops", "flops_rate_prefill=1.1 * dev.peak_tflops"),
    ("flops_rate_decode=dev.peak_tflops", "flops_rate_decode=1.1 * dev.peak_tflops"),
    ("byte_rate=dev.hbm_gbps", "byte_rate=1.1 * dev.hbm_gbps"),
    (
        "prefill_overhead=eff.prefill_overhead_ms / 1e3",
        "prefill_overhead=1.1 * eff.prefill_overhead_ms / 1e3",
    ),
    (
        "decode_overhead=eff.decode_overhead_ms / 1e3",
        "decode_overhead=1.1 * eff.decode_overhead_ms / 1e3",
    ),
    ("kv_bpt=float(kv_bytes_per_token(m))", "kv_bpt=1.1 * float(kv_bytes_per_token(m))"),
    ("weights=weight_bytes(m) - expert_bytes", "weights=1.1 * (weight_bytes(m) - expert_bytes)"),
    ("expert_weights=expert_bytes", "expert_weights=1.1 * expert_bytes"),
    (
        "expert_frac=(m.experts_per_token / m.n_routed_experts)",
        "expert_frac=1.1 * (m.experts_per_token / m.n_routed_experts)",
    ),
    ("memory_bytes=dev.memory_gb", "memory_bytes=1.1 * dev.memory_gb"),
    (
        "return self.weights + self.expert_weights * touched",
        "return self.weights + 1.1 * self.expert_weights * touched",
    ),
    ("            n * self.linear_flops\n", "            1.1 * n * self.linear_flops\n"),
    ("+ requests * self.lm_head_flops", "+ 1.1 * requests * self.lm_head_flops"),
    (
        "self.attn_coef * (n * c + n * (n + 1.0) / 2.0)",
        "self.attn_coef * (1.1 * n * c + n * (n + 1.0) / 2.0)",
    ),
    (
        "self.attn_coef * (n * c + n * (n + 1.0) / 2.0)",
        "self.attn_coef * (n * c + 1.1 * n * (n + 1.0) / 2.0)",
    ),
    ("kv_io = self.kv_bpt * (n + c)", "kv_io = self.kv_bpt * (n + 1.1 * c)"),
    ("kv_io = self.kv_bpt * (n + c)", "kv_io = self.kv_bpt * (1.1 * n + c)"),
    (
        "t_memory = (cost.weights_read(n.sum()) + kv_io.sum())",
        "t_memory = (1.1 * cost.weights_read(n.sum()) + kv_io.sum())",
    ),
    (
        "return float(max(t_compute, t_memory) + cost.prefill_overhead)",
        "return float(max(t_compute, t_memory) + 1.1 * cost.prefill_overhead)",
    ),
    (
        "flops = n * cost.linear_flops + cost.attn_coef * n * (n + 1.0) / 2.0",
        "flops = 1.1 * n * cost.linear_flops + cost.attn_coef * n * (n + 1.0) / 2.0",
    ),
    (
        "flops = n * cost.linear_flops + cost.attn_coef * n * (n + 1.0) / 2.0",
        "flops = n * cost.linear_flops + 1.1 * cost.attn_coef * n * (n + 1.0) / 2.0",
    ),
    (
        "(cost.weights_read(n) + cost.kv_bpt * n) / cost.byte_rate",
        "(1.1 * cost.weights_read(n) + cost.kv_bpt * n) / cost.byte_rate",
    ),
    (
        "(cost.weights_read(n) + cost.kv_bpt * n) / cost.byte_rate",
        "(cost.weights_read(n) + 1.1 * cost.kv_bpt * n) / cost.byte_rate",
    ),
    (
        "return np.where(n > 0, t + cost.prefill_overhead, 0.0)",
        "return np.where(n > 0, t + 1.1 * cost.prefill_overhead, 0.0)",
    ),
    (
        "flops = b * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx",
        "flops = b * (1.1 * cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx",
    ),
    (
        "flops = b * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx",
        "flops = b * (cost.linear_flops + 1.1 * cost.lm_head_flops) + cost.attn_coef * ctx",
    ),
    (
        "flops = b * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx",
        "flops = b * (cost.linear_flops + cost.lm_head_flops) + 1.1 * cost.attn_coef * ctx",
    ),
    (
        "byts = cost.weights_read(b) + cost.kv_bpt * ctx",
        "byts = 1.1 * cost.weights_read(b) + cost.kv_bpt * ctx",
    ),
    (
        "byts = cost.weights_read(b) + cost.kv_bpt * ctx",
        "byts = cost.weights_read(b) + 1.1 * cost.kv_bpt * ctx",
    ),
    (
        "byts / cost.byte_rate) + cost.decode_overhead",
        "byts / cost.byte_rate) + 1.1 * cost.decode_overhead",
    ),
    ("return link.latency_us / 1e6 + b", "return 1.1 * link.latency_us / 1e6 + b"),
    ("b / (link.bandwidth_gbps * 1e9)", "b / (1.1 * link.bandwidth_gbps * 1e9)"),
    (
        "a1 = (batch * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * context0) / fr",
        "a1 = 1.1 * (batch * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * context0) / fr",
    ),
    ("s1 = cost.attn_coef * batch / fr", "s1 = 1.1 * cost.attn_coef * batch / fr"),
    (
        "a2 = (float(cost.weights_read(batch)) + cost.kv_bpt * context0) / br",
        "a2 = 1.1 * (float(cost.weights_read(batch)) + cost.kv_bpt * context0) / br",
    ),
    ("s2 = cost.kv_bpt * batch / br", "s2 = 1.1 * cost.kv_bpt * batch / br"),
    (
        "return a1, s1, a2, s2, cost.decode_overhead",
        "return a1, s1, a2, s2, 1.1 * cost.decode_overhead",
    ),
]


def main():
    tmp = Path(tempfile.mkdtemp(prefix="scale_"))
    shutil.copytree(SRC / "src", tmp / "src")
    shutil.copytree(SRC / "tests", tmp / "tests")
    shutil.copy(SRC / "pyproject.toml", tmp)
    target = tmp / "src/prefixbench/physics/costmodel.py"
    orig = target.read_text()
    survivors, missing = [], []
    seen = {}
    for old, new in TERMS:
        k = seen.get(old, 0)
        seen[old] = k + 1
        if orig.count(old) < 1:
            missing.append(old)
            continue
        target.write_text(orig.replace(old, new, 1))
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-x",
                "-p",
                "no:cacheprovider",
                "tests/test_costmodel.py",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(tmp / "src"), "PATH": "/usr/bin:/bin", "HYPOTHESIS_PROFILE": ""},
        )
        status = "killed" if r.returncode != 0 else "SURVIVED"
        if status == "SURVIVED":
            survivors.append(new)
        print(f"{status:8s} {new[:110]}", flush=True)
    target.write_text(orig)
    print(
        f"\n{len(TERMS) - len(missing)} terms scaled ×1.1, {len(survivors)} survived, {len(missing)} not found"
    )
    for m in missing:
        print("NOT FOUND:", m)
    shutil.rmtree(tmp)


main()
