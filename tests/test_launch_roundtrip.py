"""Round trips: an imported command line, re-emitted, gives the same flags (and the same
scenario); each policy's flags, imported, give that policy back."""

from __future__ import annotations

import shlex

import pytest

from prefixbench.scenario.launch.emit import policy_flags, serve_commands
from prefixbench.scenario.launch.importer import import_deployment
from prefixbench.scenario.launch.serve import parse_serve
from prefixbench.scenario.loader import validate

M = "meta-llama/Llama-3.1-8B"
BENCH = "vllm bench serve --dataset-name random --random-input-len 800 --request-rate 3"
VLLM_P = (f"vllm serve {M} --tensor-parallel-size 2 --gpu-memory-utilization 0.9 "
          """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'""")  # fmt: skip
VLLM_D = (f"vllm serve {M} --tensor-parallel-size 2 --data-parallel-size 2 "
          "--gpu-memory-utilization 0.85 --kv-cache-dtype fp8 --block-size 32 "
          "--max-num-seqs 128 --max-num-batched-tokens 4096 "
          """--speculative-config '{"method":"mtp","num_speculative_tokens":2}' """
          "--enable-prefix-caching "
          """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'""")  # fmt: skip
SGL = "python -m sglang.launch_server --model-path"
SGL_P = f"{SGL} {M} --tp-size 2 --mem-fraction-static 0.9 --disaggregation-mode prefill"
SGL_D = (f"{SGL} {M} --tp-size 2 --mem-fraction-static 0.8 --page-size 64 "
         "--max-running-requests 256 --disaggregation-mode decode "
         "--disaggregation-decode-enable-radix-cache --enable-hierarchical-cache "
         "--hicache-ratio 3 --hicache-write-policy write_back")  # fmt: skip


SHARED = {"kv_dtype", "block", "quant"}


def imported(prefill, decode):
    r = import_deployment(prefill=prefill, decode=decode, bench=BENCH, hardware="h100-sxm",
                          link="roce-200g")  # fmt: skip
    return r, validate(r.scenario, "test")


def flag_set(text: str, role: str) -> set[tuple[str, str]]:
    """The command's modelled settings as (key, value) pairs (spellings differ: -tp, =)."""
    return {(k, str(v)) for k, (v, _) in parse_serve(text, role).values.items()}


def without_description(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "description"}


@pytest.mark.parametrize(("prefill", "decode"), [(VLLM_P, VLLM_D), (SGL_P, SGL_D)])
def test_imported_commands_re_emit_the_same_flags(prefill, decode):
    r, s = imported(prefill, decode)
    stack = "vllm" if prefill.startswith("vllm") else "sglang"
    answer = serve_commands(s, s.policy.value, stack)
    emitted = {role: shlex.join(words) for role, words in answer.flags.items()}
    given = {"prefill": flag_set(prefill, "prefill"), "decode": flag_set(decode, "decode")}
    shared = {kv for kv in given["prefill"] | given["decode"] if kv[0] in SHARED}
    for role in ("prefill", "decode"):
        back = flag_set(emitted[role], role)
        # the same flags; the settings one model_format or cluster field holds for both
        # roles (KV dtype, block size) are emitted on both servers, as they must match
        assert given[role] <= back and back - given[role] <= shared
    again, _ = imported(emitted["prefill"], emitted["decode"])
    assert without_description(again.scenario) == without_description(r.scenario)


@pytest.mark.parametrize("stack", ["vllm", "sglang"])
def test_a_vllm_import_re_emitted_for_sglang_is_the_same_scenario(stack):
    r, s = imported(SGL_P, SGL_D) if stack == "vllm" else imported(VLLM_P, VLLM_D)
    other = serve_commands(s, s.policy.value, stack)
    again, _ = imported(*(shlex.join(other.flags[k]) for k in ("prefill", "decode")))
    assert without_description(again.scenario) == without_description(r.scenario)


@pytest.mark.parametrize("stack", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "policy", ["transfer_per_request", "replicate_all_lru", "replicate_tiered"]
)
def test_each_policys_flags_import_as_that_policy(stack, policy):
    base = f"vllm serve {M}" if stack == "vllm" else f"{SGL} {M}"
    flags = policy_flags(policy, stack, host=40.0 if stack == "vllm" else 2.0).flags
    r, s = imported(
        f"{base} {shlex.join(flags['prefill'])}", f"{base} {shlex.join(flags['decode'])}"
    )
    assert s.policy.value == policy


@pytest.mark.parametrize("policy", ["recompute_on_decode", "replicate_hotset"])
def test_policies_without_an_equivalent_say_so(policy):
    for stack in ("vllm", "sglang"):
        a = policy_flags(policy, stack)
        assert a.flags is None and a.note
        assert f"no equivalent of {policy}" in a.lines()[0]


def test_cost_aware_maps_to_dynamo_conditional_disaggregation():
    a = policy_flags("cost_aware", "dynamo")
    assert "max_local_prefill_length" in a.lines()[0]
    assert policy_flags("transfer_per_request", "dynamo").flags is None


def test_every_policy_has_launch_flags_or_a_note():
    from prefixbench.registry import policy_names
    from prefixbench.registry.launch_flags import STACK_FLAGS

    assert set(STACK_FLAGS) == set(policy_names())
    for name, entry in STACK_FLAGS.items():
        for stack in ("vllm", "sglang"):
            assert entry[stack] is not None or entry["note"], name
