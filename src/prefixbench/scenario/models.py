"""Scenario models (Pydantic v2): what one simulation run is, validated before it runs.

A scenario is loaded from YAML (safe loader only), overridden with ``--set a.b=value`` and
validated here. Names (model, accelerator, link) are checked against the catalog so a typo
fails at load time with a suggestion.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from prefixbench.physics.costmodel import Efficiency
from prefixbench.registry import DECODE_ROUTERS, PREFILL_ROUTERS, policy_names

MAX_TOKENS = 1_000_000_000  # a length beyond any model's context; keeps int64 sums exact
MAX_INT = 2**63 - 1  # integers are stored in int64 columns
MAX_WEIGHT = 1e12  # empirical weights are relative; a million of these still sum finitely
MAX_INSTANCES = 1024  # per role; a P×D×C channel table of at most MAX_LINK_CHANNELS entries
MAX_LINK_CHANNELS = 1 << 20
MAX_RATE = 1e7  # req/s: far above any one cluster (a large fleet serves ~1e5 req/s)


def _takes_bool(tp: Any) -> bool:
    """Whether a field's annotation accepts a boolean (``bool``, ``bool | None``...)."""
    return tp is bool or any(_takes_bool(a) for a in get_args(tp))


def refuse_bools(value: Any, annotation: Any) -> Any:
    """YAML ``true`` is a bool, and pydantic would read it as 1 where a number is expected
    (``rate=true`` ran at 1 req/s): refuse it, and in lists of numbers too."""
    if _takes_bool(annotation):
        return value
    items = value if isinstance(value, list) else [value]
    if any(isinstance(v, bool) for v in items):
        raise ValueError(f"is true/false, but {_expected(annotation)} is expected here")
    return value


def _expected(tp: Any) -> str:
    """What a field takes, in words: its choices for a Literal (an enum), else a number."""
    kinds = (tp, *get_args(tp))
    choices = [c for a in kinds if get_origin(a) is Literal for c in get_args(a)]
    choices += [e.value for a in kinds if isinstance(a, type) and issubclass(a, Enum) for e in a]
    if choices:
        return "one of " + ", ".join(str(c) for c in choices)
    text = any(a is str for a in (tp, *get_args(tp)))
    return "a name" if text else "a number"


class _M(BaseModel):
    model_config = ConfigDict(
        extra="forbid", defer_build=True, use_enum_values=False, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _no_bools(cls, data):
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if field is not None:
                    try:
                        refuse_bools(value, field.annotation)
                    except ValueError as e:
                        raise ValueError(f"{key} {e}") from None
        return data

    @field_validator("*", mode="after")
    @classmethod
    def _fits_int64(cls, v):
        if isinstance(v, int) and not isinstance(v, bool) and not -MAX_INT <= v <= MAX_INT:
            raise ValueError("does not fit in a 64-bit integer")
        return v


# the hand-off policies, one member per registry entry (prefixbench/registry/policies.py)
Policy = Enum("Policy", [(n, n) for n in policy_names()], type=str, module=__name__)
Policy.__doc__ = "How the decode node gets a prefix whose KV is cached on the prefill node."


POLICIES: tuple[str, ...] = tuple(p.value for p in Policy)
# the seed's four (BRIEF §1: its 384 runs); the default study compares every policy (672
# runs: the seed's 384 plus replicate_tiered, cost_aware and conditional_disagg)
REFERENCE_POLICIES: tuple[str, ...] = POLICIES[:4]


# ------------------------------------------------------------------ distributions


class Fixed(_M):
    kind: Literal["fixed"] = Field(description="Always the same value.")
    value: int = Field(ge=0, le=MAX_TOKENS, description="The value (tokens).")


class Uniform(_M):
    kind: Literal["uniform"] = Field(description="Integers uniform on [low, high].")
    low: int = Field(ge=0, le=MAX_TOKENS, description="Smallest value (tokens).")
    high: int = Field(ge=0, le=MAX_TOKENS, description="Largest value (tokens).")

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LogNormal(_M):
    kind: Literal["lognormal"] = Field(
        description="Lognormal given by its mean and coefficient of variation."
    )
    mean: float = Field(gt=0, le=MAX_TOKENS, description="Mean (tokens).")
    cv: float = Field(ge=0, le=100, description="Coefficient of variation (std / mean); 0 = fixed.")
    min: int = Field(
        1, ge=0, le=MAX_TOKENS, description="Values are clipped below at this (tokens)."
    )
    max: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="Values are clipped above at this (tokens)."
    )

    @model_validator(mode="after")
    def _order(self) -> LogNormal:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class Empirical(_M):
    kind: Literal["empirical"] = Field(description="Draw from listed values with optional weights.")
    values: list[int] = Field(
        min_length=1,
        max_length=1_000_000,
        description="Possible values (tokens; 1 to 10⁶ of them).",
    )
    weights: list[float] | None = Field(
        None, description="Relative weights (default: equal), each between 0 and 10¹²."
    )

    @model_validator(mode="after")
    def _same_length(self) -> Empirical:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError("weights must have as many entries as values")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 and not all 0")
            if any(w > MAX_WEIGHT for w in self.weights):  # their sum must not overflow
                raise ValueError(f"weights must be at most {MAX_WEIGHT:.0e} (they are relative)")
        if any(v < 0 or v > MAX_TOKENS for v in self.values):
            raise ValueError(f"values must be between 0 and {MAX_TOKENS:,} tokens")
        return self


Dist = Annotated[Fixed | Uniform | LogNormal | Empirical, Field(discriminator="kind")]


# ------------------------------------------------------------------ workloads


class Arrivals(_M):
    process: Literal["poisson", "gamma"] = Field(
        "poisson", description="poisson: exponential gaps; gamma: bursty gaps with the given cv."
    )
    rate: float = Field(
        gt=0, le=MAX_RATE, description="Mean arrival rate, requests per second (10⁻⁹ to 10⁷)."
    )
    cv: float = Field(
        1.0,
        gt=0,
        le=100,
        description="Coefficient of variation of the gaps (gamma only; >1 = bursty).",
    )

    @field_validator("rate")
    @classmethod
    def _representable_rate(cls, v: float) -> float:
        if v < 1e-9:  # gaps of 1/rate seconds would overflow (or divide by an underflowed 0)
            raise ValueError("must be at least 1e-9 requests per second")
        return v

    @field_validator("cv")
    @classmethod
    def _representable_cv(cls, v: float) -> float:
        if v < 1e-6:  # the gamma shape 1/cv**2 would overflow; 1e-6 is already clockwork
            raise ValueError("must be at least 1e-6 (1e-6 already means evenly spaced arrivals)")
        return v


class PrefixPool(_M):
    count: int = Field(ge=1, le=10_000_000, description="Number of distinct shared prefixes.")
    zipf_s: float = Field(
        ge=0, le=20, description="Zipf exponent of prefix popularity (0 = uniform)."
    )
    length: Dist = Field(description="Prefix length distribution (tokens), drawn once per prefix.")


class Drift(_M):
    period_s: float = Field(
        ge=1e-3, le=1e9, description="Every period the popularity ranking rotates (1 ms to 10⁹ s)."
    )
    shift: int = Field(
        1, ge=1, le=10_000_000, description="Ranks the popularity moves by each period (up to 10⁷)."
    )


class SyntheticWorkload(_M):
    kind: Literal["synthetic"] = Field("synthetic", description="Generated requests.")
    arrivals: Arrivals = Field(description="Arrival process.")
    prefixes: PrefixPool = Field(description="The shared-prefix pool.")
    share_fraction: float = Field(
        ge=0, le=1, description="Fraction of requests that carry a shared prefix (0 = no sharing)."
    )
    suffix_length: Dist = Field(description="Unique suffix length per request (tokens).")
    output_length: Dist = Field(
        description="Output length per request (tokens, >= 1: every request makes its first "
        "token, so a distribution that can give 0 is refused)."
    )
    drift: Drift | None = Field(None, description="Popularity drift over time (None = static).")

    @field_validator("output_length")
    @classmethod
    def _at_least_one_token(cls, d):
        return at_least_one(d, "every request makes at least one token")


def at_least_one(d, why: str):
    """``d`` unless a draw from it can be below 1 (a length of 0 is refused, not rounded up)."""
    if d is None:
        return d
    low = {"fixed": "value", "uniform": "low", "lognormal": "min"}.get(d.kind)
    smallest = min(d.values) if d.kind == "empirical" else getattr(d, low)
    if smallest < 1:
        where = "values" if d.kind == "empirical" else low
        raise ValueError(f"can be 0 ({where} {smallest}), but {why}; set {where} to 1 or more")
    return d


class TraceWorkload(_M):
    kind: Literal["trace"] = Field("trace", description="Replay of a request trace file.")
    path: str = Field(
        description="Trace file path (Mooncake or Qwen-Bailian JSONL, Azure or BurstGPT CSV)."
    )
    format: Literal["mooncake", "azure", "burstgpt", "bailian", "auto"] = Field(
        "auto",
        description="Trace format; auto: from the extension and the first line (.jsonl: "
        "mooncake, or bailian for chat_id/turn records; .csv: azure, or burstgpt for a "
        "'Request tokens' column).",
    )
    block_size: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Tokens per hash_ids block; null: the format's own (Mooncake 512, "
        "Bailian 16; up to 10⁶).",
    )
    time_unit_s: float | None = Field(
        None,
        ge=1e-9,
        le=3600,
        description="Seconds per timestamp unit; null: the format's own (Mooncake ms, "
        "Bailian s; 1 ns to 1 h).",
    )
    overlength: Literal["error", "skip", "truncate"] = Field(
        "error",
        description="Requests longer than the model's context: error (stop), skip (drop "
        "them) or truncate (cap the output to what fits after the prompt, and a prompt "
        "that alone does not fit to the context minus one token); counts are reported.",
    )
    rate: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE,
        description="Rescale arrivals to this mean rate (req/s, up to 10⁷).",
    )
    start_s: float | None = Field(
        None, ge=0, le=1e10, description="Replay window start (s into the trace)."
    )
    end_s: float | None = Field(
        None, gt=0, le=1e10, description="Replay window end (s into the trace)."
    )
    skip_bad: bool = Field(
        False, description="Skip (and count) malformed records instead of failing."
    )
    overlay: SyntheticWorkload | None = Field(
        None,
        description="Azure only: prefix sharing overlaid from this synthetic model's prefix pool.",
    )


class PrefixLevel(_M):
    """One level of nested shared prefixes (system prompt, then tool schema, then document).

    A session carries level k only if it carries level k-1 (docs/model.md, "Sessions")."""

    name: str = Field("level", description="A label for the level (e.g. system, tools, document).")
    count: int = Field(ge=1, le=10_000_000, description="Number of distinct items at this level.")
    zipf_s: float = Field(
        ge=0, le=20, description="Zipf exponent of item popularity (0 = uniform)."
    )
    length: Dist = Field(description="Item length (tokens), drawn once per item.")
    share_fraction: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Probability that a session carries this level, given it carries the outer ones.",
    )


class SessionWorkload(_M):
    kind: Literal["sessions"] = Field(
        "sessions", description="Generated multi-turn sessions with a growing history."
    )
    arrivals: Arrivals = Field(description="Session arrival process (rate in sessions per second).")
    turns: Dist = Field(description="Turns per session (values below 1 count as 1).")
    turn_gap_ms: Dist = Field(
        description="Gap from one turn's arrival to the next turn's arrival, ms (generation of the "
        "previous answer plus the user's think time)."
    )
    shared: list[PrefixLevel] = Field(
        default_factory=list,
        description="Nested shared prefixes, outermost first, at the start of every turn's prompt.",
    )
    first_message: Dist | None = Field(
        None, description="Tokens of a session's first user message (default: user_message)."
    )
    user_message: Dist = Field(description="Tokens of each later turn's new user message (>= 1).")
    output_length: Dist = Field(description="Output length per turn (tokens, >= 1).")
    max_context: int = Field(
        32_768,
        ge=2,
        le=MAX_TOKENS,
        description="A session ends before a turn whose prompt + output would exceed this (tokens).",
    )

    @field_validator("first_message", "user_message", "output_length")
    @classmethod
    def _no_zero_lengths(cls, d):
        return at_least_one(d, "every turn has a message and an answer of at least one token")


Workload = Annotated[
    SyntheticWorkload | TraceWorkload | SessionWorkload, Field(discriminator="kind")
]


# ------------------------------------------------------------------ system


def _check_name(kind: str, value: str) -> str:
    from prefixbench import catalog

    getter = {
        "model": catalog.get_model,
        "accelerator": catalog.get_accelerator,
        "link": catalog.get_link,
    }
    from prefixbench.errors import CatalogError

    try:
        getter[kind](value)
    except CatalogError as e:  # re-raised as ValueError so pydantic adds the field path
        raise ValueError(f"{e.what}; {e.fix}" if e.fix else e.what) from None
    return value


class Speculative(_M):
    """Speculative decoding on the decode pool (docs/model.md §2.13)."""

    method: Literal["draft", "mtp"] = Field(
        "draft",
        description="draft: a separate draft model (draft_model); mtp: the target's own "
        "multi-token-prediction layers (mtp_layers of its shape, sharing its LM head).",
    )
    draft_model: str | None = Field(
        None, description="Draft model name from the catalog (method draft)."
    )
    mtp_layers: int = Field(1, ge=1, le=16, description="MTP layers (method mtp; 1 to 16).")
    gamma: int = Field(4, ge=1, le=32, description="Draft tokens proposed per iteration, γ.")
    acceptance: float = Field(
        0.7, gt=0, le=1, description="Probability each draft token is accepted, α (0 to 1]."
    )

    @field_validator("draft_model")
    @classmethod
    def _known_draft(cls, v: str | None) -> str | None:
        return v if v is None else _check_name("model", v)

    @model_validator(mode="after")
    def _draft_given(self) -> Speculative:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("method draft needs draft_model (a catalog model name)")
        return self


class InstanceGroup(_M):
    accelerator: str = Field(
        "l4",
        description="Accelerator name from the catalog, or a hardware YAML file (path relative "
        'to the scenario file; docs/catalog.md, "Your own hardware").',
    )
    devices: int = Field(1, ge=1, le=1024, description="Devices per instance (1 to 1024).")
    tp: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Tensor-parallel degree (default: devices / (pp·ep)); tp·pp·ep divides "
        "devices.",
    )
    pp: int = Field(1, ge=1, le=1024, description="Pipeline stages (1 to 1024; model.md §2.8).")
    ep: int = Field(1, ge=1, le=1024, description="Expert-parallel degree for MoE layers.")
    fabric: str | None = Field(
        None,
        description="Scale-up fabric between the instance's devices: nvlink3, nvlink4, "
        "nvlink5, pcie4-x16, pcie5-x16 or ideal (default: the accelerator's own).",
    )
    host_path: str = Field(
        "pcie5-x16",
        description="Decode instances: the host<->GPU path of each device (replicate_tiered, "
        "paged swap): pcie4-x16, pcie5-x16, nvlink-c2c (catalog/hostpaths.py).",
    )
    host_memory_gb: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Host DRAM per instance, GB (default: 256 per device, as a DGX H100's "
        "2 TB for 8 GPUs); memory.host_kv_gb must fit in it, and on a decode instance "
        "what the host KV pool leaves holds swapped-out KV (memory.preemption: swap; a "
        "victim that does not fit is recomputed, docs/model.md §1.5.1).",
    )
    # --- power (docs/model.md §2.11)
    power_cap_w: float | None = Field(
        None,
        gt=0,
        le=1e5,
        description="Power cap per device, W (at most the TDP; default: capped at TDP). The "
        "core clock drops until a step at the ridge fits; compute-bound steps slow.",
    )
    dvfs: bool = Field(
        False,
        description="Lower the core clock on memory-bound steps to the lowest that costs no "
        "time (saves compute energy; latency unchanged).",
    )
    speculative: Speculative | None = Field(
        None, description="Decode only: speculative decoding (draft model or MTP heads)."
    )

    @field_validator("accelerator")
    @classmethod
    def _known(cls, v: str) -> str:
        return _check_name("accelerator", v)

    @field_validator("fabric")
    @classmethod
    def _known_fabric(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from prefixbench.catalog.fabrics import get_fabric
        from prefixbench.errors import CatalogError

        try:
            get_fabric(v)
        except CatalogError as e:
            raise ValueError(f"{e.what}; {e.fix}") from None
        return v

    @field_validator("host_path")
    @classmethod
    def _known_host_path(cls, v: str) -> str:
        from prefixbench.catalog.hostpaths import get_host_path
        from prefixbench.errors import CatalogError

        try:
            get_host_path(v)
        except CatalogError as e:
            raise ValueError(f"{e.what}; {e.fix}") from None
        return v

    def host_memory(self) -> float:
        """Host DRAM of one instance, GB."""
        from prefixbench.catalog.hostpaths import HOST_DRAM_GB_PER_DEVICE

        if self.host_memory_gb is not None:
            return self.host_memory_gb
        return HOST_DRAM_GB_PER_DEVICE * self.devices

    def tp_degree(self) -> int:
        """tp, by default every device a pipeline stage and an expert group leave."""
        return max(self.devices // (self.pp * self.ep), 1) if self.tp is None else self.tp

    @model_validator(mode="after")
    def _split_divides(self) -> InstanceGroup:
        tp = self.tp_degree()
        if self.devices % (tp * self.pp * self.ep):
            raise ValueError(
                f"tp·pp·ep = {tp}·{self.pp}·{self.ep} = {tp * self.pp * self.ep} does not "
                f"divide devices = {self.devices}; set tp, pp and ep so that it does"
            )
        return self

    def parallelism(self):
        """The costmodel.Parallelism of this group."""
        from prefixbench.catalog.fabrics import default_fabric, get_fabric
        from prefixbench.physics.costmodel import Parallelism

        fabric = self.fabric or default_fabric(self.accelerator)
        return Parallelism(tp=self.tp_degree(), pp=self.pp, ep=self.ep, fabric=get_fabric(fabric))


class LinkConfig(_M):
    name: str = Field(
        "eth-25g",
        description="Link name from the catalog, or a hardware YAML file (path relative to the "
        "scenario file).",
    )
    topology: Literal["shared_nics", "private_paths"] = Field(
        "shared_nics",
        description="shared_nics: every transfer out of a prefill instance shares its egress "
        "NICs and every transfer into a decode instance its ingress NICs (FCFS, both ends "
        "held); private_paths: each prefill→decode pair has its own channels (before 0.x).",
    )
    nics_per_instance: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="shared_nics: NICs per instance (default: one per device); a request's "
        "KV is sharded across them (1 to 1024).",
    )
    streaming: Literal["after_prefill", "layerwise"] = Field(
        "after_prefill",
        description="after_prefill: the KV moves once the prefill step ends; layerwise: the "
        "decode instance admits the request when its prefill starts and each layer's KV "
        "moves as soon as it is computed (shared_nics only).",
    )
    channels: int = Field(
        1,
        ge=1,
        le=1024,
        description="private_paths only: parallel channels per prefill→decode path (FCFS "
        "each; 1 to 1024).",
    )
    bandwidth_gbps: float | None = Field(
        None,
        ge=1e-3,
        le=1e4,
        description="Override bandwidth per NIC (private_paths: per channel), GB/s "
        "(0.001 to 10,000; the catalog spans "
        "1.25 for 10 GbE to 450 for NVLink 4).",
    )
    latency_us: float | None = Field(
        None, ge=0, le=1e6, description="Override one-way latency, µs (0 to 10⁶, one second)."
    )
    efficiency: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Override the fraction of its line rate one NIC reaches in a transfer "
        "(η, 0 to 1; catalog: 0.87 on the RDMA links, 1 elsewhere).",
    )
    ceiling_gbps: float | None = Field(
        None,
        ge=1e-3,
        le=1e5,
        description="Override the most GB/s an instance's NICs reach together (shared_nics; "
        "0.001 to 10⁵, the bandwidth's floor; catalog: 190 on the RDMA links, none "
        "elsewhere).",
    )
    setup_us: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="Override the connector's cost per request's transfer, µs (0 to 10⁶; "
        "catalog: 450 on RDMA links, 0 elsewhere).",
    )
    prewarm: Literal["free", "link"] = Field(
        "free",
        description="replicate_hotset's hot set: free (resident and ready at time zero, the "
        "seed's model) or link (sent from the prefill at the first arrival over the same "
        "NICs as the requests' KV, usable once it lands).",
    )

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        return _check_name("link", v)

    def spec(self):
        """The catalog LinkSpec of ``name`` with this block's overrides applied."""
        from prefixbench import catalog

        base = catalog.get_link(self.name)
        keys = ("bandwidth_gbps", "latency_us", "efficiency", "setup_us", "ceiling_gbps")
        update = {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        return base.model_copy(update=update) if update else base


class ClusterSpec(_M):
    mode: Literal["disaggregated", "colocated"] = Field(
        "disaggregated",
        description="disaggregated: P prefill + D decode instances joined by the link; colocated: "
        "P + D instances (decode hardware) each running prefill and decode.",
    )
    colocated_scheduler: Literal["prefill_priority", "chunked"] = Field(
        "prefill_priority",
        description="Colocated only: prefill_priority (vLLM v0: prefills stall decodes) or chunked "
        "(Sarathi-Serve: prefill chunks share each step's token budget with decodes).",
    )
    chunk_token_budget: int = Field(
        1024,
        ge=2,
        le=MAX_TOKENS,
        description="Tokens per chunked step (decodes + prefill chunks): colocated chunked "
        "steps, and a decode instance's iterations carrying recompute_on_decode's prefix "
        "chunks and cost_aware's (must exceed max_decode_batch; with speculative decoding "
        "leave at least ⌈τ⌉ beyond max_decode_batch·(γ+1), the batch's verified tokens).",
    )
    prefill_instances: int = Field(
        1, ge=1, le=MAX_INSTANCES, description="Number of prefill instances (P; 1 to 1024)."
    )
    decode_instances: int = Field(
        1, ge=1, le=MAX_INSTANCES, description="Number of decode instances (D; 1 to 1024)."
    )
    prefill: InstanceGroup = Field(
        default_factory=InstanceGroup, description="Prefill instance hardware."
    )
    decode: InstanceGroup = Field(
        default_factory=InstanceGroup, description="Decode instance hardware."
    )
    link: LinkConfig = Field(
        default_factory=LinkConfig,
        description="KV link: NIC type and count per instance (docs/model.md, NICs).",
    )
    max_decode_batch: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Continuous-batching limit per decode instance (up to 10⁵).",
    )
    prefill_token_budget: int = Field(
        8192,
        ge=1,
        le=MAX_TOKENS,
        description="Most new tokens one prefill step batches (whole prompts only).",
    )
    block_size: int = Field(
        16, ge=1, le=1_000_000, description="KV block size in tokens (prefix-cache granularity)."
    )
    prefill_cache_fraction: float = Field(
        0.9, ge=0, le=1, description="Share of prefill HBM left after weights used as prefix cache."
    )
    prefill_router: str = Field(
        "least_tokens",
        description="Prefill routing: " + ", ".join(r.name for r in PREFILL_ROUTERS) + ".",
    )
    decode_router: str = Field(
        "least_load",
        description="Decode routing: " + ", ".join(r.name for r in DECODE_ROUTERS) + ".",
    )
    kv_overlap_weight: float = Field(
        1.0,
        ge=0,
        le=1e6,
        description="The kv_aware routers' weight of a request's uncached blocks against an "
        "instance's queued (prefill) or active (decode) blocks; 0 balances load only "
        "(Dynamo's --kv-overlap-score-weight, default 1).",
    )
    max_local_prefill_tokens: int = Field(
        1000,
        ge=0,
        le=MAX_TOKENS,
        description="conditional_disagg: prompts whose uncached part is at most this many "
        "tokens prefill on their decode instance (Dynamo's max_local_prefill_length, "
        "default 1000).",
    )
    local_prefill_hit_ratio: float = Field(
        0.5,
        ge=0,
        le=1,
        description="conditional_disagg: prompts whose decode-resident share exceeds this "
        "prefill on their decode instance (Dynamo's max_remote_prefill_cache_hit_ratio, "
        "default 0.5).",
    )
    cost_aware_local_prefill: bool = Field(
        True,
        description="cost_aware: also price a local prefill on the decode instance at "
        "arrival (conditional_disagg's chunked-prefill mechanism), beside transfer, "
        "promotion and recompute (docs/model.md §1.14.1); false: never local.",
    )

    @model_validator(mode="after")
    def _speculative_on_decode(self) -> ClusterSpec:
        if self.prefill.speculative is not None:
            raise ValueError("speculative decoding runs on the decode pool: set it under decode")
        return self

    @model_validator(mode="after")
    def _paths_fit(self) -> ClusterSpec:
        if self.link.topology == "shared_nics" and self.link.channels != 1:
            raise ValueError(
                f"link.channels={self.link.channels} applies to link.topology private_paths "
                "only; with shared NICs set link.nics_per_instance instead"
            )
        if self.link.streaming == "layerwise" and self.link.topology != "shared_nics":
            raise ValueError(
                "link.streaming=layerwise is modelled on shared NICs only; set "
                "link.topology: shared_nics or link.streaming: after_prefill"
            )
        paths = self.prefill_instances * self.decode_instances * self.link.channels
        if paths > MAX_LINK_CHANNELS:  # the engine keeps one clock per channel of each path
            raise ValueError(
                f"prefill_instances × decode_instances × link.channels is {paths:,}; at most "
                f"{MAX_LINK_CHANNELS:,} link channels in all"
            )
        return self


class MemorySpec(_M):
    budget_factor: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="Decode KV budget as a multiple of the reference demand of the scenario "
        "as its file states it (its rate and hardware, on the model run), so one factor is "
        "one size in GB whatever --set changes (docs/model.md): 1.0 relaxed, ~0.35 at the "
        "admission cliff (at most 1000).",
    )
    kv_budget_gb: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Absolute decode KV budget per instance, GB (at most 10⁶); overrides "
        "budget_factor.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Share of each decode device's memory for weights, activations and KV, "
        "as vLLM's --gpu-memory-utilization (e.g. 0.9): the KV pool per decode instance is "
        "this share of its HBM less the weights and an activation reserve (docs/model.md, "
        "\"Memory in GB\"); overrides budget_factor.",
    )
    host_kv_gb: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="replicate_tiered: host-DRAM KV pool per decode instance, GB (default: "
        "twice the HBM KV budget, SGLang HiCache's --hicache-ratio 2, within host memory); "
        "at most cluster.decode.host_memory_gb.",
    )
    hotset_share: float = Field(
        0.3,
        ge=0,
        le=1,
        description="replicate_hotset: share of the budget prewarmed with hot prefixes.",
    )
    hotset_refresh_s: float | None = Field(
        None,
        ge=1e-3,
        le=1e9,
        description="replicate_hotset: every this many seconds (1 ms to 10⁹ s: a refresh "
        "more often than a decode step re-ranks nothing new), re-rank the hot set from the "
        "blocks used since the last refresh and warm the decode instances with what they "
        "lack (over the link with cluster.link.prewarm: link); None: the set is fixed.",
    )
    # --- paged
    admission: Literal["paged", "reserve"] = Field(
        "paged",
        description="Decode KV admission: paged (blocks as tokens are generated, FCFS queue, "
        "preemption; as vLLM/SGLang) or reserve (prompt + output up front; on_full decides).",
    )
    preemption: Literal["recompute", "swap"] = Field(
        "recompute",
        description="paged: a preempted request re-prefills its context on resume (recompute) "
        "or moves its KV to host memory and back (swap, over cluster.decode.host_path).",
    )
    reserved_decode_tokens: int = Field(
        0,
        ge=0,
        le=2**31 - 1,
        description="paged: SGLang's --num-reserved-decode-tokens (its default 512; vLLM "
        "has none): a request is admitted only if its own prompt blocks plus this many "
        "tokens for every admitted, unfinished request on the instance (itself: at most its "
        "output − 1) fit after trimming idle replicas (docs/model.md §1.5.2); 0: off.",
    )
    prefill_hold: bool = Field(
        True,
        description="Prefill-side back-pressure: a prefill instance keeps each prompt's KV "
        "from its step's start until the decode pull lands (or the request is rejected), "
        "out of its prefix cache's room, and starts a step only while the held KV and the "
        "step's prompts fit (vLLM NixlConnector's delay_free_blocks, SGLang's prefill "
        "inflight queue: both stacks do it; docs/model.md §1.4.1). false: freed when the "
        "step ends (the behaviour before).",
    )
    host_write_policy: Literal["write_back", "write_through", "write_through_selective"] = Field(
        "write_back",
        description="replicate_tiered, cost_aware: when an HBM block's host copy is written, as "
        "SGLang's --hicache-write-policy: write_back when it is trimmed (the admission that "
        "trimmed it waits for the copy), write_through when its request finishes, "
        "write_through_selective on its first reuse (docs/model.md §1.13).",
    )
    l3_store_gb: float = Field(
        0.0,
        ge=0,
        le=1e9,
        description="replicate_tiered: capacity of the shared L3 store under the decode "
        "tiers, GB for the whole cluster (Mooncake Store, LMCache remote, HiCache L3 as "
        "SGLang's --hicache-storage-backend); the decode node writes evicted and generated "
        "blocks to it and reads a chain's blocks past its HBM and host runs from it "
        "(docs/model.md §1.13.1). 0: no store (the behaviour before).",
    )
    l3_store_gbps: float = Field(
        200.0,
        ge=0.008,
        le=1e6,
        description="The L3 store's bandwidth, Gbit/s (0.008, i.e. 1 MB/s as a link's "
        "floor, to 10⁶), one FCFS queue for every read and "
        "write (default 200: one 200 Gb/s RDMA NIC, an NVIDIA ConnectX-7 port, as "
        "Mooncake's transfer engine uses; an assumption, docs/model.md §1.13.1).",
    )
    cache_generated: bool = Field(
        True,
        description="Decode-side caching of generated tokens: a finished request's full answer "
        "blocks join its decode instance's replicas (replicating policies), so the next turn "
        "of a session or trace conversation hits its previous answer (SGLang "
        "cache_finished_req, vLLM block hashing; docs/model.md §1.10.1). false: prompt "
        "chains only (the behaviour before).",
    )
    queue_timeout_s: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="paged: reject a request still queued for admission after this long (s, "
        "up to 10⁶); null waits for ever.",
    )
    on_full: Literal["reject", "wait"] = Field(
        "reject",
        description="reserve: when admission finds no room after trimming replicas, reject or "
        "wait.",
    )
    wait_timeout_s: float = Field(
        2.0,
        ge=0,
        le=1e6,
        description="on_full=wait: reject after waiting this long (s, up to 10⁶).",
    )

    @model_validator(mode="after")
    def _one_size(self) -> MemorySpec:
        if self.kv_budget_gb is not None and self.gpu_memory_utilization is not None:
            raise ValueError(
                "memory.kv_budget_gb and memory.gpu_memory_utilization both size the KV "
                "pool; give one of them"
            )
        return self


class SLOSpec(_M):
    ttft_ms: float = Field(
        2000.0,
        gt=0,
        le=1e9,
        description="TTFT target, ms (arrival → first decode token; at most 10⁹).",
    )
    tpot_ms: float = Field(
        100.0, gt=0, le=1e9, description="TPOT target, ms per output token after the first."
    )


class RunSpec(_M):
    requests: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Requests to simulate (synthetic; default 10,000) or the most to replay "
        "(trace; default all).",
    )
    warmup_requests: int = Field(
        1_000,
        ge=0,
        le=10_000_000,
        description="Leading requests excluded from steady-state statistics.",
    )
    hindsight_max_requests: int | None = Field(
        200_000,
        ge=0,
        le=10_000_000,
        description="Above this many requests the hindsight (Belady) schedule is skipped and "
        "handoff_hindsight_ms is null; null: always computed (docs/model.md, \"The optimal "
        "bound\").",
    )


class ModelFormat(_M):
    """How the model's bytes are stored, overriding its config (docs/catalog.md, "Formats").

    Written ``model_format: {...}``, or inside a ``model`` mapping (``model: {name: x,
    kv_dtype: fp8}``), or ``--set model.kv_dtype=fp8``.
    """

    kv_dtype: Literal["bf16", "fp16", "fp8", "int8"] | None = Field(
        None,
        description="KV-cache element type; fp8/int8 halve KV bytes, memory and transfers. "
        "Default: the model's torch_dtype (what the weights compute in).",
    )
    weights: Literal["bf16", "fp16", "fp8", "int8", "int4"] | None = Field(
        None,
        description="Weight format of the linear layers, overriding the config's "
        "quantization_config: fp8 = 1 B + 128x128 block scales, int8 = 1 B, int4 = GPTQ/AWQ "
        "g128 (0.52 B). Sizes the weights in memory and the weight reads of every step.",
    )
    # --- asymmetric models (docs/model.md §2.12)
    ced_encoder_layers: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Causal encoder-decoder: prefill runs only the first N layers and "
        "projects the decoder layers' KV from the last encoder state (dense models only).",
    )
    ced_replay_on: Literal["prefill", "decode"] = Field(
        "prefill",
        description="Where the bounded replay runs (with ced_encoder_layers): prefill (the "
        "prefill instance runs the last ced_replay_tokens of each prompt through the decoder "
        "layers and holds the whole model) or decode (prefill is encoder-only and holds the "
        "embedding, encoder and K/V projections; the decode instance replays those tokens "
        "through the whole model before the request's first iteration).",
    )
    ced_replay_tokens: int = Field(
        128,
        ge=1,
        le=1_000_000,
        description="Bounded replay window W (with ced_encoder_layers): the last "
        "min(W, prompt) prompt tokens run the decoder layers (seed 003, after the DeepSeek "
        "CED design's n_win, arXiv:2609.19969 §2.2).",
    )


def split_model_section(data: dict) -> dict:
    """``model: {name, kv_dtype, weights}`` as ``model: name`` + ``model_format: {…}``."""
    section = data.get("model")
    if not isinstance(section, dict):
        return data
    out = {k: v for k, v in data.items() if k != "model"}
    fmt = out.get("model_format")
    fmt = dict(fmt) if isinstance(fmt, dict) else {}
    fmt.update({k: v for k, v in section.items() if k != "name"})
    out["model_format"] = fmt
    if "name" in section:
        out["model"] = section["name"]
    return out


def override_path(keys: list[str]) -> list[str]:
    """Where ``--set model.kv_dtype=…`` lands: model.name is the model, the rest its format."""
    if len(keys) == 2 and keys[0] == "model":
        return ["model"] if keys[1] == "name" else ["model_format", keys[1]]
    return keys


class Scenario(_M):
    name: str = Field(
        "scenario",
        max_length=200,
        description="Short name used in tables (at most 200 characters).",
    )
    description: str = Field("", max_length=10_000, description="What this scenario represents.")
    model: str = Field(
        "qwen2-1.5b", description="Model name from the catalog, or a config.json path."
    )
    model_format: ModelFormat = Field(
        default_factory=ModelFormat,
        description="KV dtype and weight format (also written model.kv_dtype, model.weights).",
    )
    policy: Policy = Field(Policy.transfer_per_request, description="Prefix hand-off policy.")
    cluster: ClusterSpec = Field(
        default_factory=ClusterSpec, description="Instances, link and batching."
    )
    workload: Workload = Field(description="Where requests come from.")
    memory: MemorySpec = Field(default_factory=MemorySpec, description="Decode KV memory budget.")
    slo: SLOSpec = Field(default_factory=SLOSpec, description="Latency targets for goodput.")
    efficiency: Efficiency = Field(default_factory=Efficiency, description="Roofline calibration.")

    @field_validator("efficiency", mode="before")
    @classmethod
    def _no_bool_knobs(cls, v):
        if isinstance(v, dict):
            for key, value in v.items():
                field = Efficiency.model_fields.get(key)
                if field is not None:
                    try:
                        refuse_bools(value, field.annotation)
                    except ValueError as e:
                        raise ValueError(f"efficiency.{key} {e}") from None
        return v

    run: RunSpec = Field(default_factory=RunSpec, description="Run length and warm-up.")
    seed: int = Field(0, ge=0, description="Random seed; same seed, same results.")
    # the scenario budget_factor is measured against: as its file states it, on this model
    # (set by the loader; None: the scenario itself). Never moves with --set (docs/model.md).
    _reference: Scenario | None = PrivateAttr(None)

    def reference(self) -> Scenario:
        """The scenario whose reference demand ``memory.budget_factor`` multiplies."""
        return self._reference if self._reference is not None else self

    @model_validator(mode="before")
    @classmethod
    def _model_section(cls, data):
        return split_model_section(data) if isinstance(data, dict) else data

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        return _check_name("model", v)

    @model_validator(mode="after")
    def _admission_fields(self) -> Scenario:
        # a field of the other admission mode set away from its default would be silently
        # ignored (its default is fine: a dumped scenario, e.g. a result's, carries it)
        m = self.memory
        if self.cluster.mode == "colocated":
            return self  # colocated instances always reserve (docs/model.md §1.5)
        other = ("on_full", "wait_timeout_s") if m.admission == "paged" else ("queue_timeout_s",)
        fields = type(m).model_fields
        given = [f for f in other if getattr(m, f) != fields[f].default]
        if given:
            mode = "reserve" if m.admission == "paged" else "paged"
            raise ValueError(
                f"memory.{given[0]} applies to memory.admission={mode} only (this scenario "
                f"uses {m.admission}); drop it, or set memory.admission={mode}"
            )
        return self

    @model_validator(mode="after")
    def _warmup(self) -> Scenario:
        if self.run.requests is not None and self.run.warmup_requests >= self.run.requests:
            raise ValueError(
                f"run.warmup_requests ({self.run.warmup_requests}) must be below "
                f"run.requests ({self.run.requests})"
            )
        return self
