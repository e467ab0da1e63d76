"""`prefixbench import`: launch and bench command lines → a validated scenario YAML.

``import_deployment`` reads the serving commands (``--prefill`` + ``--decode``, or
``--serve`` for a colocated deployment; vLLM or SGLang) and the ``vllm bench serve``
command, writes every scenario field they determine, and returns the scenario with a row
per flag saying where it went (docs/import.md).
"""

from __future__ import annotations

from pathlib import Path

from prefixbench.errors import ScenarioError

from . import caching, deploy, resources
from .bench import apply_bench
from .deploy import Build
from .rows import APPROX, MAPPED, ImportResult
from .serve import Serve, parse_serve

DEFAULT_ACCELERATOR = "l4"  # InstanceGroup's default
DEFAULT_LINK = "eth-25g"  # LinkConfig's default


def import_deployment(
    *,
    prefill: str | None = None,
    decode: str | None = None,
    serve: str | None = None,
    bench: str | None = None,
    hardware: str | None = None,
    link: str | None = None,
    name: str = "imported",
) -> ImportResult:
    serves = _serves(prefill, decode, serve)
    if bench is None:
        raise ScenarioError("no load given", where="import",
                            fix='give the load as --bench "vllm bench serve …"')  # fmt: skip
    b = Build()
    b.set("name", name)
    b.set("description", "imported from: " + " | ".join(s.stack for s in serves))
    b.set("cluster.mode", "colocated" if serve else "disaggregated")
    _hardware(b, hardware, link, colocated=serve is not None)
    resources.scenario_model(b, serves)
    deploy.apply_formats(b, serves)
    for s in serves:
        _one_role(b, s)
    apply_bench(b, bench)
    rows = b.rows + [r for s in serves for r in s.rows]
    from prefixbench.scenario.loader import validate

    validate(b.data, "import")  # the same checks as `run` makes
    return ImportResult(scenario=b.data, rows=rows)


def _serves(prefill: str | None, decode: str | None, serve: str | None) -> list[Serve]:
    if serve is not None and (prefill or decode):
        raise ScenarioError("--serve is a colocated deployment; --prefill/--decode a "
                            "disaggregated one", where="import", fix="give one or the other")  # fmt: skip
    if serve is not None:
        return [parse_serve(serve, "serve")]
    if not (prefill and decode):
        raise ScenarioError("a disaggregated deployment needs both --prefill and --decode",
                            where="import", fix="give both, or --serve for one colocated "
                            "server")  # fmt: skip
    return [parse_serve(prefill, "prefill"), parse_serve(decode, "decode")]


def _hardware(b: Build, hardware: str | None, link: str | None, colocated: bool) -> None:
    from prefixbench import catalog
    from prefixbench.errors import CatalogError

    acc = hardware or DEFAULT_ACCELERATOR
    try:  # a name the catalog does not know is the --hardware flag's fault
        catalog.get_accelerator(acc)
    except CatalogError as e:
        raise CatalogError(
            e.what, where=e.where or "--hardware", fix=e.fix or "see `prefixbench catalog`"
        ) from None
    b.set("cluster.prefill.accelerator", acc)
    b.set("cluster.decode.accelerator", acc)
    if hardware:
        b.row("import", f"--hardware {hardware}", "cluster.prefill/decode.accelerator")
    else:
        b.row("import", "(no --hardware)", "cluster.*.accelerator", APPROX,
              f"a launch command does not name the GPU: {acc} assumed; give --hardware")  # fmt: skip
    if colocated:
        return
    b.set("cluster.link.name", link or DEFAULT_LINK)
    if link:
        b.row("import", f"--link {link}", "cluster.link.name")
    else:
        b.row("import", "(no --link)", "cluster.link.name", APPROX,
              f"a launch command does not name the network: {DEFAULT_LINK} assumed; give "
              "--link")  # fmt: skip


def _one_role(b: Build, s: Serve) -> None:
    deploy.apply_parallelism(b, s)
    deploy.apply_batching(b, s)
    caching.apply_transfer(b, s)
    if s.role == "prefill":
        caching.apply_prefill_cache(b, s)
    pool = resources.apply_memory(b, s)
    if s.role == "decode":
        caching.decode_policy(b, s)
        caching.apply_host_pool(b, s, pool)
    elif s.role == "serve":
        for k in ("prefix_cache", "no_radix", "kv_transfer"):
            if k in s.values:
                b.row(s, s.flag(k), "–", MAPPED, "a colocated server's prefix cache is modelled")
    resources.apply_speculative(b, s)


def scenario_yaml(result: ImportResult, commands: dict[str, str]) -> str:
    """The scenario as YAML, headed by the commands it came from (as comments)."""
    import yaml

    head = ["# written by `prefixbench import` from:"]
    for role, text in commands.items():
        if text:
            flat = " ".join(text.replace("\\\n", " ").split())
            head.append(f"#   --{role}: {flat}")
    body = yaml.safe_dump(result.scenario, sort_keys=False, allow_unicode=True)
    return "\n".join(head) + "\n" + body


def write_scenario(result: ImportResult, commands: dict[str, str], out: Path) -> Path:
    from prefixbench.support.files import write_atomic

    return write_atomic(out, scenario_yaml(result, commands), ScenarioError)
