"""Each hand-off policy as the launch flags that realize it, per stack and role (data).

Keyed by policy name (``policies.py``; tests/test_launch_roundtrip.py checks every policy
has an entry); each entry gives, for vLLM and SGLang, the prefill and decode
server's flags (``None``: the stack has no equivalent, and ``note`` says what is nearest),
and for NVIDIA Dynamo the setting where its conditional disaggregation applies. ``{host}``
stands for the host KV pool (vLLM: bytes; SGLang: the ratio to the HBM pool), filled by
``scenario/launch/emit.py``. Sources are in docs/import.md, "Answers as flags".
"""

from __future__ import annotations

NIXL_PRODUCER = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
NIXL_CONSUMER = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
# vLLM: NixlConnector for the hand-off plus the OffloadingConnector's CPU tier, combined by
# MultiConnector (vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py)
NIXL_OFFLOAD_CONSUMER = (
    '{"kv_connector":"MultiConnector","kv_role":"kv_consumer","kv_connector_extra_config":'
    '{"connectors":[{"kv_connector":"NixlConnector","kv_role":"kv_consumer"},'
    '{"kv_connector":"OffloadingConnector","kv_role":"kv_consumer",'
    '"kv_connector_extra_config":{"cpu_bytes_to_use":{host}}}]}}'
)

VLLM_PREFILL = ["--kv-transfer-config", NIXL_PRODUCER]
SGLANG_PREFILL = ["--disaggregation-mode", "prefill"]

NO_HOTSET = (
    "neither stack pins a hot set of prefixes on the decode servers; nearest: the "
    "replicate_all_lru flags, with the hot prefixes sent to every decode server before traffic"
)

STACK_FLAGS: dict[str, dict] = {
    "transfer_per_request": {
        "vllm": {"prefill": VLLM_PREFILL,
                 "decode": ["--no-enable-prefix-caching", "--kv-transfer-config", NIXL_CONSUMER]},
        "sglang": {"prefill": SGLANG_PREFILL, "decode": ["--disaggregation-mode", "decode"]},
        "note": "",
    },
    "replicate_all_lru": {
        "vllm": {"prefill": VLLM_PREFILL,
                 "decode": ["--enable-prefix-caching", "--kv-transfer-config", NIXL_CONSUMER]},
        "sglang": {"prefill": SGLANG_PREFILL,
                   "decode": ["--disaggregation-mode", "decode",
                              "--disaggregation-decode-enable-radix-cache"]},
        "note": "",
    },
    "replicate_tiered": {
        "vllm": {"prefill": VLLM_PREFILL,
                 "decode": ["--enable-prefix-caching", "--kv-transfer-config",
                            NIXL_OFFLOAD_CONSUMER]},
        "sglang": {"prefill": SGLANG_PREFILL,
                   "decode": ["--disaggregation-mode", "decode",
                              "--disaggregation-decode-enable-radix-cache",
                              "--enable-hierarchical-cache", "--hicache-ratio", "{host}",
                              "--hicache-write-policy", "write_back"]},
        "note": "",
    },
    "replicate_hotset": {"vllm": None, "sglang": None, "note": NO_HOTSET},
    "recompute_on_decode": {
        "vllm": None,
        "sglang": None,
        "note": "neither stack lets a decode server recompute a cached prefix instead of "
        "receiving its KV",
    },
    "cost_aware": {
        "vllm": None,
        "sglang": None,
        "dynamo": "conditional disaggregation: prefill on the decode worker when the prompt "
        "beyond its prefix hit is at most max_local_prefill_length tokens and the prefill "
        "queue holds fewer than max_prefill_queue_size requests (Dynamo's disaggregated "
        "router); a fixed length threshold, where cost_aware prices each hand-off",
        "note": "neither vLLM nor SGLang decides the hand-off per request",
    },
    "conditional_disagg": {
        "vllm": None,
        "sglang": None,
        "dynamo": "conditional disaggregation (Dynamo's disaggregated router, "
        "lib/llm/src/disagg_router.rs): max_local_prefill_length = the scenario's "
        "cluster.max_local_prefill_tokens; a request whose decode prefix hit share is above "
        "cluster.local_prefill_hit_ratio also prefills locally",
        "note": "the rule is Dynamo's router in front of vLLM or SGLang workers; neither "
        "server decides it alone",
    },
}  # fmt: skip
