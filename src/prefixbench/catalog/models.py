"""Model presets, copied field by field from each model's Hugging Face ``config.json``.

``source`` is the config.json URL. ``params_reported`` is the total parameter count on the
model's Hugging Face page (the "Model size" the Hub reads from the safetensors files); where
the card's own text gives only a rounded figure ("7B", "70B"), the comment says so. Byte
widths follow ``torch_dtype`` (Llama 2 ships float16: 2 bytes, like bf16).
"""

from __future__ import annotations

from .specs import ModelSpec

_HF = "https://huggingface.co"

_PRESETS = [
    ModelSpec(
        name="qwen2-0.5b",
        hf_id="Qwen/Qwen2-0.5B",
        # config.json: 24 layers, hidden 896, 14 q heads / 2 kv heads (head_dim 896/14 = 64),
        # MLP 4864, vocab 151936, max_position_embeddings 131072, tied embeddings.
        layers=24,
        hidden_size=896,
        heads=14,
        kv_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        tied_embeddings=True,
        qkv_bias=True,  # Qwen2 attention has Q/K/V bias (model card: "attention QKV bias")
        max_context=131072,
        # https://huggingface.co/Qwen/Qwen2-0.5B : "494M params" (Qwen2 blog table: 0.49B)
        params_reported=494e6,
        source=f"{_HF}/Qwen/Qwen2-0.5B/blob/main/config.json",
    ),
    ModelSpec(
        name="qwen2-1.5b",
        hf_id="Qwen/Qwen2-1.5B",
        # config.json: 28 layers, hidden 1536, 12/2 heads (head_dim 128), MLP 8960,
        # vocab 151936, max_position_embeddings 131072, tied embeddings.
        layers=28,
        hidden_size=1536,
        heads=12,
        kv_heads=2,
        head_dim=128,
        intermediate_size=8960,
        vocab_size=151936,
        tied_embeddings=True,
        qkv_bias=True,
        max_context=131072,
        # https://huggingface.co/Qwen/Qwen2-1.5B : "1.54B params" (Qwen2 blog table: 1.54B)
        params_reported=1.54e9,
        source=f"{_HF}/Qwen/Qwen2-1.5B/blob/main/config.json",
    ),
    ModelSpec(
        name="qwen2-7b",
        hf_id="Qwen/Qwen2-7B",
        # config.json: 28 layers, hidden 3584, 28/4 heads (head_dim 128), MLP 18944,
        # vocab 152064, max_position_embeddings 131072, untied embeddings.
        layers=28,
        hidden_size=3584,
        heads=28,
        kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        tied_embeddings=False,
        qkv_bias=True,
        max_context=131072,
        # https://huggingface.co/Qwen/Qwen2-7B : "7.62B params". The Qwen2 blog table says
        # 7.07B, which does not match the config's own arithmetic (7.62B); the Hub figure is used.
        params_reported=7.62e9,
        source=f"{_HF}/Qwen/Qwen2-7B/blob/main/config.json",
    ),
    ModelSpec(
        name="llama-3.1-8b",
        hf_id="meta-llama/Llama-3.1-8B",
        # config.json: 32 layers, hidden 4096, 32/8 heads (head_dim 128), MLP 14336,
        # vocab 128256, max_position_embeddings 131072, bfloat16.
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_context=131072,
        # https://huggingface.co/meta-llama/Llama-3.1-8B : "8.03B params" (card text: "8B")
        params_reported=8.03e9,
        source=f"{_HF}/meta-llama/Llama-3.1-8B/blob/main/config.json",
    ),
    ModelSpec(
        name="llama-3.1-70b",
        hf_id="meta-llama/Llama-3.1-70B",
        # config.json: 80 layers, hidden 8192, 64/8 heads (head_dim 128), MLP 28672,
        # vocab 128256, max_position_embeddings 131072, bfloat16.
        layers=80,
        hidden_size=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        max_context=131072,
        # https://huggingface.co/meta-llama/Llama-3.1-70B : "70.6B params" (card text: "70B")
        params_reported=70.6e9,
        source=f"{_HF}/meta-llama/Llama-3.1-70B/blob/main/config.json",
    ),
    ModelSpec(
        # v0.3, not v0.1: v0.3 has no sliding window (sliding_window: null), so full-context
        # KV is what the cost model assumes; v0.1's 4096-token window would overstate KV.
        name="mistral-7b",
        hf_id="mistralai/Mistral-7B-v0.3",
        # config.json: 32 layers, hidden 4096, 32/8 heads (head_dim 128), MLP 14336,
        # vocab 32768, max_position_embeddings 32768, bfloat16.
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32768,
        max_context=32768,
        # https://huggingface.co/mistralai/Mistral-7B-v0.3 : "7.25B params"
        params_reported=7.25e9,
        source=f"{_HF}/mistralai/Mistral-7B-v0.3/blob/main/config.json",
    ),
    ModelSpec(
        name="deepseek-v2-lite",
        hf_id="deepseek-ai/DeepSeek-V2-Lite",
        # config.json: 27 layers, hidden 2048, 16 heads, vocab 102400,
        # max_position_embeddings 163840, dense intermediate_size 10944 (first layer only).
        layers=27,
        hidden_size=2048,
        heads=16,
        kv_heads=16,  # num_key_value_heads; unused under MLA (KV is the shared latent)
        head_dim=128,  # no head_dim key: hidden/heads; MLA widths below are what count
        intermediate_size=10944,
        vocab_size=102400,
        max_context=163840,
        # MLA: kv_lora_rank 512, q_lora_rank null (plain q_proj), rope 64, nope 128, v 128.
        kv_lora_rank=512,
        q_lora_rank=0,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        # MoE: 64 routed experts, 6 per token, 2 shared, expert width 1408,
        # first_k_dense_replace 1 (layer 0 keeps the dense MLP).
        n_routed_experts=64,
        n_shared_experts=2,
        experts_per_token=6,
        moe_intermediate_size=1408,
        first_dense_layers=1,
        # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite : "15.7B params"
        # (card text: "16B total params, 2.4B active params")
        params_reported=15.7e9,
        source=f"{_HF}/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json",
    ),
    ModelSpec(
        name="llama-2-7b",
        hf_id="meta-llama/Llama-2-7b-hf",
        # config.json: 32 layers, hidden 4096, 32/32 heads (MHA), MLP 11008, vocab 32000,
        # max_position_embeddings 4096, float16.
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=32,
        head_dim=128,
        intermediate_size=11008,
        vocab_size=32000,
        max_context=4096,
        # https://huggingface.co/meta-llama/Llama-2-7b-hf : "6.74B params" (card text: "7B")
        params_reported=6.74e9,
        source=f"{_HF}/meta-llama/Llama-2-7b-hf/blob/main/config.json",
    ),
    ModelSpec(
        name="llama-2-13b",
        hf_id="meta-llama/Llama-2-13b-hf",
        # config.json: 40 layers, hidden 5120, 40/40 heads (MHA), MLP 13824, vocab 32000,
        # max_position_embeddings 4096, float16.
        layers=40,
        hidden_size=5120,
        heads=40,
        kv_heads=40,
        head_dim=128,
        intermediate_size=13824,
        vocab_size=32000,
        max_context=4096,
        # https://huggingface.co/meta-llama/Llama-2-13b-hf : "13B params" (card text: "13B")
        params_reported=13.0e9,
        source=f"{_HF}/meta-llama/Llama-2-13b-hf/blob/main/config.json",
    ),
    ModelSpec(
        name="llama-2-70b",
        hf_id="meta-llama/Llama-2-70b-hf",
        # config.json: 80 layers, hidden 8192, 64/8 heads (GQA), MLP 28672, vocab 32000,
        # max_position_embeddings 4096, float16.
        layers=80,
        hidden_size=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=32000,
        max_context=4096,
        # https://huggingface.co/meta-llama/Llama-2-70b-hf : "69B params" (card text: "70B",
        # which is 1.5% above the weights actually shipped)
        params_reported=69.0e9,
        source=f"{_HF}/meta-llama/Llama-2-70b-hf/blob/main/config.json",
    ),
]

MODELS: dict[str, ModelSpec] = {m.name: m for m in _PRESETS}
