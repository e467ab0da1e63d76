"""The report's fixed streaming comparison (study/transfer_path.py)."""

from __future__ import annotations

from prefixbench.study.transfer_path import streaming_comparison, streaming_md


def test_layerwise_hides_transfer_at_the_fixed_point():
    df = streaming_comparison(["qwen2-0.5b"])
    assert df.height == 4 and df["stable"].all()
    t = {(r["streaming"], r["policy"]): r["ttft_mean_ms"] for r in df.iter_rows(named=True)}
    assert t[("layerwise", "transfer_per_request")] < t[("after_prefill", "transfer_per_request")]


def test_section_names_both_modes_per_model():
    text = "\n".join(streaming_md(["qwen2-0.5b"]))
    assert "## Layer-wise streaming (fixed comparison)" in text
    assert "`qwen2-0.5b`: transfer " in text and "(after prefill → layer-wise)" in text
