"""Launch-command import (prefixbench import): every refusal is one line naming where and
how to fix it (docs/reliability.md, "Third pass"; the fuzzer's launch target found these)."""

from __future__ import annotations

import pytest
from robustness_util import assert_clear

from prefixbench.errors import PrefixbenchError
from prefixbench.scenario.launch.importer import import_deployment

M = "meta-llama/Llama-3.1-8B"
BENCH = "vllm bench serve --dataset-name random --request-rate 4 --num-prompts 300"
SGL = "python -m sglang.launch_server --model-path"


@pytest.mark.parametrize(
    "cmds,where",
    [({"serve": f"vllm serve {M} -dp 2", "bench": "vllm bench serve --request-rate"}, "--bench"),
     ({"serve": f"vllm serve {M} -dp 2", "bench": "vllm bench serve --random-input-len"}, "--bench"),
     ({"serve": f"vllm serve {M} -dp 2", "bench": BENCH + " --random-range-ratio"}, "--bench"),
     ({"serve": f"vllm serve {M} -dp 2", "bench": BENCH + " --burstiness 0"}, "--bench"),
     ({"serve": f"vllm serve {M} -dp 2", "bench": BENCH, "hardware": "nope"}, "--hardware"),
     ({"serve": f"{SGL} {M} --dp 2 --mem-fraction-static 2", "bench": BENCH}, "--serve"),
     ({"serve": f"vllm serve {M} --tensor-parallel-size 0", "bench": BENCH}, "--serve"),
     ({"prefill": f"{SGL} {M} --disaggregation-mode prefill",
       "decode": f"{SGL} {M} --disaggregation-mode decode --speculative-algorithm EAGLE",
       "bench": BENCH}, "--decode")],
)  # fmt: skip
def test_import_refusals_are_one_line_with_where_and_fix(cmds, where):
    with pytest.raises(PrefixbenchError) as e:
        import_deployment(**cmds)
    assert_clear(e.value, where=where)
