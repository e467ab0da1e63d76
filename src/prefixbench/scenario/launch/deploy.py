"""Serving settings (``Serve``) → the scenario's model, cluster, memory and policy fields.

Each setting writes named scenario fields and one table row saying where it went. Where a
stack's default matters (vLLM V1 keeps its prefix cache on unless told
``--no-enable-prefix-caching``; SGLang's decode server in disaggregation mode keeps none
unless ``--disaggregation-decode-enable-radix-cache``) the row says "(default)".
"""

from __future__ import annotations

from typing import Any

from prefixbench.errors import ScenarioError

from .rows import APPROX, MAPPED, NO_EFFECT, NOT_MODELLED, Row
from .serve import Serve

KV_DTYPES = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16",
             "half": "fp16", "fp16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8",
             "fp8_e5m2": "fp8", "int8": "int8"}  # fmt: skip
QUANT = {"fp8": "fp8", "w8a8_fp8": "fp8", "fbgemm_fp8": "fp8", "w8a8_int8": "int8",
         "awq": "int4", "awq_marlin": "int4", "gptq": "int4", "gptq_marlin": "int4",
         "moe_wna16": "int4"}  # fmt: skip
MTP_METHODS = {"mtp", "deepseek_mtp", "nextn", "qwen3_next_mtp", "ernie_mtp", "glm4_moe_mtp"}
DRAFT_METHODS = {"draft_model", "eagle", "eagle3", "standalone"}
OFFLOAD_CONNECTORS = {"OffloadingConnector", "LMCacheConnectorV1"}
TRANSFER_CONNECTORS = {"NixlConnector", "MooncakeConnector", "MooncakeConnectorV1",
                       "P2pNcclConnector", "LMCacheConnectorV1", "MooncakeStoreConnector"}  # fmt: skip


class Build:
    """The scenario dict being filled, and the rows that say what filled it."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.rows: list[Row] = []

    def set(self, path: str, value: Any) -> None:
        node = self.data
        *head, last = path.split(".")
        for key in head:
            node = node.setdefault(key, {})
        node[last] = value

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.data
        for key in path.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def row(self, s: Serve | str, flag: str, fields: str, status: str = MAPPED, note: str = ""):
        command = s if isinstance(s, str) else s.role
        self.rows.append(Row(command, flag, fields, status, note))


def group_of(s: Serve) -> str:
    return "cluster.prefill" if s.role == "prefill" else "cluster.decode"


def apply_parallelism(b: Build, s: Serve) -> None:
    """tp and pp: the instance's devices are tp·pp; dp: instances of the role."""
    g = group_of(s)
    tp, pp = s.get("tp", 1), s.get("pp", 1)
    if tp < 1 or pp < 1:
        raise ScenarioError(
            "parallel sizes must be at least 1",
            where=f"--{s.role}",
            fix="give every parallel size (tp, pp, dp) as a whole number >= 1",
        )
    b.set(f"{g}.devices", tp * pp)
    b.set(f"{g}.tp", tp)
    b.set(f"{g}.pp", pp)
    for key, field in (("tp", f"{g}.tp, {g}.devices"), ("pp", f"{g}.pp, {g}.devices")):
        if key in s.values:
            b.row(s, s.flag(key), field)
    if "dp" in s.values or s.role == "serve":  # a colocated import sets its instance count
        _instances(b, s, s.get("dp", 1))


def _instances(b: Build, s: Serve, dp: int) -> None:
    if s.role != "serve":
        b.set(f"cluster.{s.role}_instances", dp)
        b.row(s, s.flag("dp"), f"cluster.{s.role}_instances")
        return
    if dp < 2:
        raise ScenarioError(
            f"a colocated deployment of {dp} instance is not modelled: colocated mode runs "
            "prefill_instances + decode_instances ≥ 2",
            where="--serve",
            fix="give --data-parallel-size 2 or more (SGLang: --dp 2), or import a "
            "disaggregated deployment with --prefill and --decode",
        )
    b.set("cluster.prefill_instances", dp // 2)
    b.set("cluster.decode_instances", dp - dp // 2)
    b.row(s, s.flag("dp"), "cluster.prefill_instances + decode_instances", MAPPED,
          f"{dp} colocated instances, each running prefill and decode")  # fmt: skip


def apply_formats(b: Build, serves: list[Serve]) -> None:
    """KV dtype and weight format: one model_format for both roles."""
    for key, table, field in (
        ("kv_dtype", KV_DTYPES, "model_format.kv_dtype"),
        ("quant", QUANT, "model_format.weights"),
    ):
        chosen: dict[str, str | None] = {}
        for s in serves:
            if key not in s.values:
                continue
            raw = str(s.get(key))
            if raw not in table:
                known = ", ".join(sorted(k for k in table if k != "auto"))
                raise ScenarioError(
                    f"{s.flag(key)}: this format is not modelled",
                    where=f"--{s.role}",
                    fix=f"use one of {known}, or set {field} in the YAML by hand",
                )
            chosen[s.role] = table[raw]
            b.row(s, s.flag(key), field if table[raw] else "– (the model's own dtype)")
        if len(set(chosen.values())) > 1:
            raise ScenarioError(
                f"the roles give different {field} ({chosen}); the simulation has one",
                where="--prefill/--decode",
                fix="give the same format to both",
            )
        if chosen and next(iter(chosen.values())):
            b.set(field, next(iter(chosen.values())))


def apply_batching(b: Build, s: Serve) -> None:
    """Block size, sequences per batch, tokens per step, chunked prefill."""
    if "block" in s.values:
        old = b.get("cluster.block_size")
        if old is not None and old != s.get("block"):
            b.row(s, s.flag("block"), "cluster.block_size", APPROX,
                  f"the roles' block sizes differ; the decode's ({old}) is used")  # fmt: skip
        else:
            b.set("cluster.block_size", s.get("block"))
            b.row(s, s.flag("block"), "cluster.block_size")
    if "max_seqs" in s.values:
        if s.role == "prefill":
            b.row(s, s.flag("max_seqs"), "–", NOT_MODELLED,
                  "a prefill step batches prompts up to "
                  "cluster.prefill_token_budget tokens, not a count of sequences")  # fmt: skip
        else:
            b.set("cluster.max_decode_batch", s.get("max_seqs"))
            b.row(s, s.flag("max_seqs"), "cluster.max_decode_batch")
    if "max_batched" in s.values:
        field = (
            "cluster.prefill_token_budget" if s.role == "prefill" else "cluster.chunk_token_budget"
        )
        b.set(field, s.get("max_batched"))
        b.row(s, s.flag("max_batched"), field)
    _chunked(b, s)


def _chunked(b: Build, s: Serve) -> None:
    on = s.get("chunked")
    if s.role == "serve":
        # vLLM V1 always chunks prefills; SGLang chunks by --chunked-prefill-size (default on)
        if on is False and s.stack == "vllm":
            raise ScenarioError(
                "vLLM V1 always chunks prefills; --no-enable-chunked-prefill is not honoured",
                where="--serve",
                fix="drop --no-enable-chunked-prefill",
            )
        b.set("cluster.colocated_scheduler", "chunked")
        flag = s.flag("chunked") or f"({s.stack} default: chunked prefill)"
        b.row(s, flag, "cluster.colocated_scheduler")
    elif "chunked" in s.values:
        status, note = (NO_EFFECT, "decode steps carry no prompts") if s.role == "decode" else (
            NOT_MODELLED, "a prefill step runs whole prompts")  # fmt: skip
        b.row(s, s.flag("chunked"), "–", status, note)
