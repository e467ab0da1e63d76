"""The hand-off policies: how the decode node gets a prefix whose KV is cached on the
prefill node (docs/model.md §1.6). One entry per policy, in the order every table, legend
and CLI choice lists them (the seed's four first)."""

from __future__ import annotations

from typing import NamedTuple


class Policy(NamedTuple):
    name: str  # what users type (scenario, --policy, --policies)
    code: int  # the engine's integer code: engine/layout.py POL_*
    does: str  # what the decode node does: the README policy table, docs/reference.md
    mechanism: str  # what the engine does at hand-off (engine/policies.py)
    colour: str  # plot colour, Okabe-Ito (distinguishable with colour-vision deficiencies)
    legend: str  # short label in figure legends and narrow tables
    simplicity: int  # lower is simpler to run: the tie-breaking order between policies
    section: str  # where docs/model.md describes it


POLICIES: tuple[Policy, ...] = (
    Policy(
        "transfer_per_request",
        0,
        "receives the whole prompt KV over the link on every request",
        "the whole prompt KV (prefix + suffix) crosses the link on every request",
        "#7f7f7f",  # grey: the baseline
        "transfer",
        0,
        "§1.6",
    ),
    Policy(
        "recompute_on_decode",
        1,
        "receives only the uncached KV and recomputes the cached prefix itself",
        "only the KV the prefill node computed crosses; the cached prefix is rebuilt on decode",
        "#E69F00",  # orange
        "recompute",
        1,
        "§1.6, §1.9",
    ),
    Policy(
        "replicate_hotset",
        2,
        "keeps a prewarmed resident set of globally hot prefixes",
        "a prewarmed set of globally hot blocks stays resident; other misses are not kept",
        "#56B4E9",  # sky blue
        "hotset",
        2,
        "§1.10",
    ),
    Policy(
        "replicate_all_lru",
        3,
        "keeps every transferred prefix as a replica, trimmed LRU when memory is needed",
        "every transferred block becomes a resident replica, trimmed LRU when memory is short",
        "#009E73",  # bluish green
        "all-LRU",
        3,
        "§1.10",
    ),
    Policy(
        "replicate_tiered",
        4,
        "the same, with a host-DRAM tier below HBM: trimmed blocks are demoted there and "
        "promoted back over PCIe instead of crossing the link",
        "as all-LRU, but blocks trimmed from HBM drop to a host-DRAM tier and come back over "
        "the host path when that lands before the link would",
        "#CC79A7",  # reddish purple
        "tiered",
        4,
        "§1.13",
    ),
    Policy(
        "cost_aware",
        5,
        "decides each request from its own queues: prefill it locally, send the missing "
        "blocks, promote them from host memory, or recompute the cached prefix",
        "per request, the cheapest of a local prefill (at arrival), transfer, promotion and "
        "recompute now (queues, batch stall); keeps every block (keeping costs no memory "
        "admission could use)",
        "#0072B2",  # blue
        "cost-aware",
        5,
        "§1.14",
    ),
    Policy(
        "conditional_disagg",
        6,
        "prefills a request itself when its uncached part is short or mostly resident "
        "there (NVIDIA Dynamo's rule); otherwise receives it from a prefill instance and "
        "keeps it, as all-LRU",
        "Dynamo's conditional disaggregation: a prompt whose uncached part is short, or "
        "mostly resident on its decode instance, prefills there (chunks in the decode "
        "iterations); others prefill remotely, as all-LRU",
        "#D55E00",  # vermillion
        "conditional",
        6,
        "§1.16",
    ),
)

_BY_NAME = {p.name: p for p in POLICIES}


def policy_names() -> tuple[str, ...]:
    """Every policy's name, in display order."""
    return tuple(_BY_NAME)


def policy(name: str) -> Policy:
    """The entry named ``name`` (KeyError if there is none)."""
    return _BY_NAME[name]
