"""`vllm bench serve` flags → the scenario's workload, SLOs, run length and seed.

Sources (docs/import.md, "Load"): vllm/benchmarks/serve.py (arrivals, goodput, results) and
vllm/benchmarks/datasets.py (the datasets' lengths).

- Arrivals: gaps drawn from a gamma distribution of shape ``--burstiness`` b and mean
  1/``--request-rate``, so b = 1 is Poisson and the gaps' coefficient of variation is
  1/√b (a gamma's cv is 1/√shape).
- ``random``: every prompt is ``--random-prefix-len`` tokens shared by all requests, then
  a unique part drawn uniformly on [⌊L(1−r)⌋, ⌈L(1+r)⌉] for ``--random-input-len`` L and
  ``--random-range-ratio`` r; outputs likewise on [max(⌊O(1−r)⌋, 1), ⌈O(1+r)⌉]. (vLLM
  first takes the tokenizer's special tokens off L; that token or two is not modelled.)
- ``prefix_repetition``: ``--prefix-repetition-num-prefixes`` prefixes of
  ``-prefix-len`` tokens, each used by an equal share of the requests in shuffled order
  (uniform popularity, Zipf s = 0), a unique ``-suffix-len`` suffix and ``-output-len``
  output tokens.
- ``--max-concurrency``: a closed-loop cap the simulation does not model (its arrivals are
  open-loop); with a finite ``--request-rate`` it is warned, with the default rate (inf,
  all requests at once) it is an error.
"""

from __future__ import annotations

import math
from typing import Any

from prefixbench.errors import ScenarioError

from .cmdline import Command, Flag, parse_command
from .deploy import Build
from .rows import APPROX, MAPPED, NO_EFFECT, NOT_MODELLED, OUTPUT, UNKNOWN

# flag -> default (vLLM's); every flag the workload reads
DEFAULTS: dict[str, Any] = {
    "--dataset-name": "random",
    "--num-prompts": 1000,
    "--request-rate": math.inf,
    "--burstiness": 1.0,
    "--random-input-len": 1024,
    "--random-output-len": 128,
    "--random-range-ratio": 0.0,
    "--random-prefix-len": 0,
    "--prefix-repetition-prefix-len": 256,
    "--prefix-repetition-suffix-len": 256,
    "--prefix-repetition-num-prefixes": 10,
    "--prefix-repetition-output-len": 128,
    "--num-warmups": 0,
    "--seed": 0,
}
FLOATS = {"--request-rate", "--burstiness", "--random-range-ratio"}
READ = set(DEFAULTS) | {"--max-concurrency", "--goodput", "--percentile-metrics",
                        "--metric-percentiles", "--seed", "--num-warmups", "--model",
                        "--dataset-path", "--ignore-eos"}  # fmt: skip
NO_EFFECT_FLAGS = frozenset({
    "--backend", "--base-url", "--host", "--port", "--endpoint", "--tokenizer",
    "--save-result", "--save-detailed", "--append-result", "--result-dir", "--result-filename",
    "--metadata", "--label", "--served-model-name", "--disable-tqdm", "--trust-remote-code",
    "--endpoint-type", "--tokenizer-mode", "--temperature", "--top-p", "--top-k",
    "--ready-check-timeout-sec", "--profile",
})  # fmt: skip
DATASETS = {"random", "prefix_repetition", "burstgpt", "sharegpt", "custom"}


def parse_bench(text: str) -> Command:
    switches = {"--ignore-eos", "--save-result", "--save-detailed", "--append-result",
                "--disable-tqdm", "--trust-remote-code", "--profile"}  # fmt: skip
    multi = frozenset({"--goodput"})
    cmd = parse_command(text, "--bench", {}, switches, READ - switches - multi, multi)
    if cmd.stack != "vllm-bench":
        raise ScenarioError("not a `vllm bench serve` command", where="--bench",
                            fix="give the serving commands with --prefill/--decode/--serve")  # fmt: skip
    return cmd


class Bench:
    """The bench command's flags by name, with vLLM's defaults for the unset ones."""

    def __init__(self, cmd: Command, b: Build) -> None:
        self.flags: dict[str, Flag] = {}
        self.b = b
        for flag in cmd.flags:
            if flag.name in READ:
                self.flags[flag.name] = flag
            elif flag.name in NO_EFFECT_FLAGS:
                b.row("bench", flag.text(), "–", NO_EFFECT, "does not change the load")
            else:
                b.row("bench", flag.text(), "–", UNKNOWN,
                      "not known to prefixbench: not simulated; check whether it changes the "
                      "load")  # fmt: skip

    def value(self, name: str) -> Any:
        flag = self.flags.get(name)
        if flag is None:
            return DEFAULTS.get(name)
        kind = float if name in FLOATS else (int if isinstance(DEFAULTS.get(name), int) else str)
        if flag.value is None:
            raise ScenarioError(f"{flag.text()} has no value", where="--bench",
                                fix=f"give {name} a value, or leave it out")  # fmt: skip
        try:
            return kind(flag.value)
        except ValueError:
            raise ScenarioError(f"{flag.text()} is not {kind.__name__}", where="--bench",
                                fix=f"give {name} a {kind.__name__}") from None  # fmt: skip

    def used(self, *names: str, field: str, status: str = MAPPED, note: str = "") -> None:
        shown = " ".join(self.flags[n].text() for n in names if n in self.flags)
        if shown:
            self.b.row("bench", shown, field, status, note)


def apply_bench(b: Build, text: str) -> None:
    bench = Bench(parse_bench(text), b)
    workload = _workload(bench)
    if workload["kind"] == "synthetic":
        workload["arrivals"] = _arrivals(bench)
    b.set("workload", workload)
    _run_length(bench)
    _slo(bench)
    _outputs(bench)


def _arrivals(bench: Bench) -> dict:
    rate, burst = bench.value("--request-rate"), bench.value("--burstiness")
    conc = bench.flags.get("--max-concurrency")
    if not math.isfinite(rate):
        raise ScenarioError(
            "--request-rate inf (the default) sends every request at once"
            + (f", capped by {conc.text()}: a closed loop" if conc else "")
            + "; the simulation's arrivals are open-loop at a finite rate",
            where="--bench",
            fix="give --request-rate R (req/s); for a closed loop of N clients, about N / the "
            "mean end-to-end latency",
        )
    if burst <= 0:
        raise ScenarioError(
            "--burstiness must be > 0",
            where="--bench",
            fix="give --burstiness a number above 0 (1 is Poisson)",
        )
    out: dict[str, Any] = {"rate": rate}
    if burst != 1.0:
        out.update(process="gamma", cv=1 / math.sqrt(burst))
    bench.used("--request-rate", field="workload.arrivals.rate")
    bench.used("--burstiness", field="workload.arrivals.process, cv = 1/√burstiness")
    if conc:
        bench.used("--max-concurrency", field="–", status=NOT_MODELLED,
                   note="vLLM holds a new request while this many are in "
                   "flight; here arrivals are open-loop, so overload shows as queueing "
                   "(TTFT) instead of a lower sent rate")  # fmt: skip
    return out


def _workload(bench: Bench) -> dict:
    name = bench.value("--dataset-name")
    if name not in DATASETS:
        raise ScenarioError(f"--dataset-name {name} is not modelled", where="--bench",
                            fix="use random, prefix_repetition or burstgpt")  # fmt: skip
    bench.used("--dataset-name", field="workload.kind")
    if name == "random":
        return _random(bench)
    if name == "prefix_repetition":
        return _prefix_repetition(bench)
    if name == "burstgpt":
        return _burstgpt(bench)
    raise ScenarioError(
        f"--dataset-name {name}: its prompts are text, and prefixbench has no tokenizer",
        where="--bench",
        fix="give --dataset-name random with the dataset's mean lengths, or replay a trace "
        "(`run --trace`, docs/traces.md)",
    )


def _uniform(mean: int, r: float, low_floor: int) -> dict:
    low, high = (
        max(math.floor(mean * (1 - r)), low_floor),
        max(math.ceil(mean * (1 + r)), low_floor),
    )
    return {"kind": "fixed", "value": low} if low == high else {
        "kind": "uniform", "low": low, "high": high}  # fmt: skip


def _random(bench: Bench) -> dict:
    r = bench.value("--random-range-ratio")
    if not 0 <= r < 1:
        raise ScenarioError(
            "--random-range-ratio must be in [0, 1)",
            where="--bench",
            fix="give --random-range-ratio from 0 up to (not including) 1",
        )
    prefix = bench.value("--random-prefix-len")
    bench.used("--random-input-len", "--random-range-ratio", field="workload.suffix_length")
    bench.used("--random-output-len", field="workload.output_length")
    bench.used("--random-prefix-len", field="workload.prefixes (one prefix, every request)")
    return {
        "kind": "synthetic",
        "prefixes": {"count": 1, "zipf_s": 0.0, "length": {"kind": "fixed", "value": prefix}},
        "share_fraction": 1.0 if prefix > 0 else 0.0,
        "suffix_length": _uniform(bench.value("--random-input-len"), r, 0),
        "output_length": _uniform(bench.value("--random-output-len"), r, 1),
    }


def _prefix_repetition(bench: Bench) -> dict:
    p = "--prefix-repetition-"
    bench.used(f"{p}num-prefixes", field="workload.prefixes.count (zipf_s 0: equal shares)")
    bench.used(f"{p}prefix-len", field="workload.prefixes.length")
    bench.used(f"{p}suffix-len", field="workload.suffix_length")
    bench.used(f"{p}output-len", field="workload.output_length")
    return {
        "kind": "synthetic",
        "prefixes": {
            "count": bench.value(f"{p}num-prefixes"),
            "zipf_s": 0.0,
            "length": {"kind": "fixed", "value": bench.value(f"{p}prefix-len")},
        },
        "share_fraction": 1.0,
        "suffix_length": {"kind": "fixed", "value": bench.value(f"{p}suffix-len")},
        "output_length": {"kind": "fixed", "value": bench.value(f"{p}output-len")},
    }


def _burstgpt(bench: Bench) -> dict:
    path = bench.value("--dataset-path")
    if not path:
        raise ScenarioError("--dataset-name burstgpt needs --dataset-path (the BurstGPT CSV)",
                            where="--bench", fix="add --dataset-path FILE.csv")  # fmt: skip
    rate = bench.value("--request-rate")
    bench.used("--dataset-path", field="workload.path", status=APPROX,
               note="vLLM draws only the lengths from the CSV and times arrivals by "
               "--request-rate; here the trace's own gaps are replayed, rescaled to that "
               "mean rate")  # fmt: skip
    if bench.value("--burstiness") != 1.0:
        bench.used("--burstiness", field="–", status=NOT_MODELLED,
                   note="with a trace, the trace's own gaps are kept")  # fmt: skip
    return {"kind": "trace", "path": path, "format": "burstgpt",
            "rate": rate if math.isfinite(rate) else None}  # fmt: skip


def _run_length(bench: Bench) -> None:
    n, warm = bench.value("--num-prompts"), bench.value("--num-warmups") or 0
    bench.b.set("run.requests", n + warm)
    bench.b.set("run.warmup_requests", warm)
    bench.used("--num-prompts", field="run.requests")
    bench.used("--num-warmups", field="run.warmup_requests (leading requests left out)")
    if "--seed" in bench.flags:
        bench.b.set("seed", bench.value("--seed"))
        bench.used("--seed", field="seed", note="a different generator: not vLLM's prompts")
    if "--ignore-eos" not in bench.flags:
        bench.b.row("bench", "(no --ignore-eos)", "–", APPROX,
                    "the simulation makes every output its full length, as --ignore-eos "
                    "does; without it the server may stop a response early")  # fmt: skip
    else:
        bench.used("--ignore-eos", field="– (every output runs to its length, as simulated)")


def _slo(bench: Bench) -> None:
    flag = bench.flags.get("--goodput")
    if flag is None or not flag.value:
        return
    for item in flag.value.replace(",", " ").split():
        metric, _, ms = item.partition(":")
        try:
            value = float(ms)
        except ValueError:
            raise ScenarioError(f"--goodput {item}: give METRIC:MS, e.g. ttft:500",
                                where="--bench", fix="write each goodput target as METRIC:MS") from None  # fmt: skip
        if metric in ("ttft", "tpot"):
            bench.b.set(f"slo.{metric}_ms", value)
            bench.b.row("bench", f"--goodput {item}", f"slo.{metric}_ms")
        elif metric == "e2el":
            bench.b.row("bench", f"--goodput {item}", "–", NOT_MODELLED,
                        "goodput counts TTFT and TPOT targets only")  # fmt: skip
        else:
            raise ScenarioError(f"--goodput {item}: unknown metric {metric}", where="--bench",
                                fix="use ttft, tpot or e2el")  # fmt: skip


def _outputs(bench: Bench) -> None:
    for name, note in (
        ("--percentile-metrics", "reported by `run --json` and `run --save-result`"),
        ("--metric-percentiles", "pass `run --percentiles` with these"),
    ):
        bench.used(name, field="– (output)", status=OUTPUT, note=note)
    if "--model" in bench.flags:
        bench.used("--model", field="– (the serving command's model)", status=NO_EFFECT)
