"""Trace formats `--trace` reads (docs/traces.md): the name `--trace-format` takes, the
file extension that selects it when no format is given, and what the file holds."""

from __future__ import annotations

from typing import NamedTuple


class TraceFormat(NamedTuple):
    name: str
    file: str  # how the file is recognised when no format is given (workload/traces.sniff_format)
    description: str


TRACE_FORMATS: tuple[TraceFormat, ...] = (
    TraceFormat(
        "mooncake",
        "`.jsonl`",
        "Mooncake JSONL: one JSON object per line with timestamp, input and output lengths "
        "and block hash ids",
    ),
    TraceFormat(
        "azure",
        "`.csv`",
        "Azure LLM inference CSV: timestamp, context and generated token counts (no prefixes)",
    ),
    TraceFormat(
        "burstgpt",
        "`.csv` whose header names `Request tokens`",
        "BurstGPT CSV: timestamp, model, request and response tokens (no prefixes)",
    ),
    TraceFormat(
        "bailian",
        "`.jsonl` with `chat_id`/`turn`, or `blksz_16` in the name",
        "Qwen-Bailian JSONL: Mooncake records of 16-token block hash ids, timestamps in seconds",
    ),
)
