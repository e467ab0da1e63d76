"""What hardware a model and its KV budget need: the fix a "does not fit" error suggests.

An instance of ``devices`` accelerators holds ``devices × memory_gb`` (ideal tensor
parallelism, as costmodel.InstanceCost assumes). The fix names the devices of the current
accelerator that would hold the need, and the smallest catalog accelerator that holds it on
one device (or on the fewest devices), so a 7B model on an L4 is told about an L40S or an
A100, not only about adding L4s.
"""

from __future__ import annotations

import math

from prefixbench import catalog

MAX_DEVICES = 64  # beyond this, "add devices" is not a useful suggestion


def devices_needed(need_bytes: float, memory_gb: float) -> int:
    """The fewest devices of ``memory_gb`` each that hold strictly more than ``need_bytes``."""
    return max(1, math.floor(need_bytes / (memory_gb * 1e9)) + 1)


def fit_fix(need_bytes: float, role: str, accelerator: str, devices: int) -> str:
    """ "use cluster.decode.accelerator=X (… GB), or cluster.decode.devices=N" for a need."""
    here = catalog.get_accelerator(accelerator)
    n_here = devices_needed(need_bytes, here.memory_gb)
    options = []
    bigger = sorted(
        (a for a in catalog.ACCELERATORS.values() if a.memory_gb > here.memory_gb),
        key=lambda a: (devices_needed(need_bytes, a.memory_gb), a.memory_gb, a.name),
    )
    if bigger:
        a = bigger[0]
        n = devices_needed(need_bytes, a.memory_gb)
        options.append(
            f"--set cluster.{role}.accelerator={a.name} "
            f"({a.memory_gb:g} GB per device"
            + (f", with --set cluster.{role}.devices={n}" if n > 1 else "")
            + ")"
        )
    if n_here <= MAX_DEVICES and n_here > devices:
        options.append(f"--set cluster.{role}.devices={n_here} ({n_here}x {here.name})")
    if not options:
        return f"the need ({need_bytes / 1e9:.1f} GB) exceeds every catalog accelerator"
    return f"a {role} instance needs more than {need_bytes / 1e9:.1f} GB: " + ", or ".join(options)


# ---------------------------------------------------------------- the KV pool in GB
LOGIT_BYTES = 4  # the sampler's logits are fp32 (vLLM profile_run samples max_num_seqs rows)


def activation_reserve_bytes(model, tp: int, step_tokens: int, max_batch: int) -> float:
    """Peak activation memory per device of one decode iteration (docs/model.md, "Memory in
    GB"): ``step_tokens`` tokens through the widest layer (4 hidden-size buffers and the
    gate/up MLP output, sharded over ``tp``) in the compute dtype, plus fp32 logits for
    ``max_batch`` sequences. vLLM measures this with a profile run
    (vllm-project/vllm vllm/v1/worker/gpu_worker.py, determine_available_memory); this is
    the same quantity estimated from the shape, so approximate."""
    width = 4 * model.hidden_size + 2 * model.intermediate_size / tp
    return step_tokens * width * model.weight_bytes + max_batch * model.vocab_size * LOGIT_BYTES


def kv_pool_bytes(
    utilization: float, memory_bytes: float, weights: float, reserve_per_device: float,
    devices: int,
) -> float:  # fmt: skip
    """KV bytes of one instance at vLLM's ``--gpu-memory-utilization``: the share of its
    HBM (all ``devices``) less the weights and each device's activation reserve."""
    return utilization * memory_bytes - weights - reserve_per_device * devices
