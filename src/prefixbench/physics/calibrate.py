"""Fit the roofline's efficiency block to measured step times, and load fitted blocks.

A profile is a plain CSV (one measured step per row) or the result JSON of vLLM's
``vllm bench latency --output-json`` or ``vllm bench serve --save-result``. Every measurement
becomes a sum of roofline steps, each ``max(a·x, b·y) + c + o``, where ``a`` is the step's
GEMM FLOPs over the tensor peak at the default eff(T) curve, ``b`` its weight bytes over the
bandwidth, ``x = 1/MFU`` of its phase, ``y = 1/MBU`` of the weights, ``c`` its attention
operator at the default attention and KV efficiencies and ``o`` the phase's overhead. The
fit restricts itself to those six parameters: T½, ``mfu_attention`` and ``mbu_kv`` keep the
values fitted to kernel measurements (docs/validation.md), as step and TTFT/TPOT profiles of
a few rows cannot separate them from the MFU and MBU. For a fixed assignment of steps to their binding term the
model is linear in ``(x_prefill, x_decode, y, o_prefill, o_decode, o_request)``, so the fit alternates:
assign each step to the term that binds at the current estimate, solve the bounded linear
least-squares problem on relative errors, repeat until the assignment is stable. Exact data
is recovered exactly; a parameter no row depends on keeps its default and is reported.

A client-side time (a CSV row of phase ``ttft``, a ``bench serve`` TTFT) is one prefill step
plus ``request_overhead_ms`` (docs/model.md §2.14); a server-side ``prefill`` row is the
step alone. Fitting both overheads apart needs both kinds of row: from TTFT rows alone the
two are one constant, and the fit splits it arbitrarily (their sum is what it determines).
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prefixbench.errors import PrefixbenchError
from prefixbench.physics.costmodel import (
    Efficiency,
    InstanceCost,
    attention_time,
    decode_series_coeffs,
    gemm_time,
)
from prefixbench.support.suggest import did_you_mean

PARAMS = (
    "mfu_prefill",
    "mfu_decode",
    "mbu",
    "prefill_overhead_ms",
    "decode_overhead_ms",
    "request_overhead_ms",
    "prompt_overhead_us",
)
# fitted unless a caller names its parameters: the per-prompt-token cost joins only on
# request (from TTFT rows alone it trades off against MFU and the per-request cost)
DEFAULT_PARAMS = PARAMS[:6]
# what `calibrate --fit` accepts besides parameter names
FIT_SETS = {"default": DEFAULT_PARAMS, "all": PARAMS}
CSV_COLUMNS = ("phase", "tokens", "batch", "context", "devices", "ms")


class ProfileError(PrefixbenchError):
    """A calibration profile is unreadable, incomplete or inconsistent."""


# ---------------------------------------------------------------- measurements


@dataclass
class Measurement:
    """One measured time and the roofline steps it is the sum of.

    ``a``/``b``: per step, seconds of compute at MFU 1 and of memory at MBU 1; ``phase``: 0
    prefill, 1 decode (selects the MFU and overhead).
    """

    kind: str  # prefill | decode | sequence (a whole vLLM `bench latency` run)
    ms: float
    where: str
    label: str
    a: np.ndarray = field(repr=False)
    b: np.ndarray = field(repr=False)
    phase: np.ndarray = field(repr=False)
    requests: float = 0.0  # client-side requests in it: each pays request_overhead_ms
    c: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # attention, s
    prompt_tokens: float = 0.0  # client-side prompt tokens: each pays prompt_overhead_us

    def predict(self, eff: Efficiency) -> float:
        x = np.where(self.phase == 0, 1.0 / eff.mfu_prefill, 1.0 / eff.mfu_decode)
        o = np.where(self.phase == 0, eff.prefill_overhead_ms, eff.decode_overhead_ms)
        steps = float(np.sum(np.maximum(self.a * x, self.b / eff.mbu)) * 1e3 + o.sum())
        client = self.requests * eff.request_overhead_ms
        return (
            steps + self.attention_ms() + client + self.prompt_tokens * eff.prompt_overhead_us / 1e3
        )

    def attention_ms(self) -> float:
        """The steps' attention operators (fixed efficiencies: not fitted), ms."""
        return float(self.c.sum()) * 1e3


def _unit_cost(model, dev, devices: int) -> InstanceCost:
    """Roofline coefficients at GEMM and weight efficiency 1 and no overhead (times are then
    a and b); attention at its default efficiencies (c)."""
    one = Efficiency(
        mfu_prefill=1,
        mfu_decode=1,
        mbu=1,
        prefill_overhead_ms=0,
        decode_overhead_ms=0,
        request_overhead_ms=0,
    )
    return InstanceCost.build(model, dev, devices, one)


def prefill_steps(cost: InstanceCost, tokens: int, cached: int, requests: int = 1):
    """(a, b, c) of one prefill step over ``requests`` prompts of ``tokens`` new tokens each."""
    gemm, attn, kv_io = cost.prefill_split(tokens, cached)
    total = tokens * requests
    a = float(gemm_time(cost, float(gemm) * requests, total, cost.flops_rate_prefill))
    b = float(cost.weights_read(total)) / cost.byte_rate
    c = float(attention_time(cost, float(attn) * requests, float(kv_io) * requests))
    return a, b, c


def decode_steps(cost: InstanceCost, batch: int, context: float, iterations: int = 1):
    """(a, b, c) arrays of ``iterations`` decode iterations of ``batch`` sequences whose
    total context starts at ``batch · context`` and grows by ``batch`` per iteration."""
    a1, s1, a2, s2, _ = decode_series_coeffs(cost, batch, batch * context)
    j = np.arange(iterations, dtype=np.float64)
    gemm = batch * (cost.linear_flops + cost.lm_head_flops)
    a = float(gemm_time(cost, gemm, batch, cost.flops_rate_decode))
    b = float(cost.weights_read(batch)) / cost.byte_rate
    return np.full(iterations, a), np.full(iterations, b), np.maximum(a1 + s1 * j, a2 + s2 * j)


def _measurement(
    kind, ms, where, label, steps, requests: float = 0.0, prompt_tokens: float = 0.0
) -> Measurement:
    a = np.concatenate([np.atleast_1d(np.asarray(s[0], dtype=float)) for s in steps])
    b = np.concatenate([np.atleast_1d(np.asarray(s[1], dtype=float)) for s in steps])
    ph = np.concatenate(
        [np.full(np.atleast_1d(np.asarray(s[0])).shape, s[2], dtype=np.int8) for s in steps]
    )
    c = np.concatenate([np.atleast_1d(np.asarray(s[3], dtype=float)) for s in steps])
    return Measurement(kind, ms, where, label, a, b, ph, requests, c, prompt_tokens)


# ---------------------------------------------------------------- reading profiles


def _lookup(kind: str, name: str, where: str):
    from prefixbench.catalog import get_accelerator, get_model

    try:
        return get_model(name) if kind == "model" else get_accelerator(name)
    except PrefixbenchError as e:
        raise ProfileError(e.what, where=where, fix=e.fix) from None


def _number(row: dict, col: str, where: str, *, default=None, integer=True, positive=True):
    raw = (row.get(col) or "").strip()
    if not raw:
        if default is not None:
            return default
        raise ProfileError(f"no value in column '{col}'", where=where, fix=f"fill in '{col}'")
    try:
        v = float(raw[:400])  # a 5,000-digit integer is not a measurement (and float() of
    except ValueError:  # a longer string is slow)
        raise ProfileError(
            f"column '{col}' is not a number: {raw!r}", where=where, fix="write a number"
        ) from None
    if not math.isfinite(v) or (v <= 0 if positive else v < 0):
        need = "> 0" if positive else ">= 0"
        raise ProfileError(f"column '{col}' must be {need}, got {raw}", where=where,
                           fix="remove the row or fix the measurement")  # fmt: skip
    if integer and v != int(v):
        raise ProfileError(
            f"column '{col}' must be a whole number, got {raw}", where=where, fix="round it"
        )
    if integer:
        _check_range(col, v, 0, MAX_TOKENS, where)
    return int(v) if integer else v


MAX_PROFILE_BYTES = 64 << 20  # a profile of ~10⁶ rows; a 200 MB CSV is not a measurement
MAX_TOKENS = 10_000_000  # prompt, output, batch or context lengths (the scenario's cap)
MAX_DEVICES = 1024  # devices per instance, as scenario/models.py's InstanceSpec.devices


def _check_size(path: Path) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        return  # reading it gives the error
    if size > MAX_PROFILE_BYTES:
        raise ProfileError(
            f"{size / 2**20:.0f} MiB is larger than a profile can be ({MAX_PROFILE_BYTES >> 20} MiB)",
            where=str(path),
            fix="give the measured steps only (one row per step)",
        )


def _check_range(name: str, v, lo: int, hi: int, where: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ProfileError(
            f"'{name}' is {_show(v)}, outside {lo} to {hi:,}",
            where=where,
            fix=f"give a whole number from {lo} to {hi:,}",
        )


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:18] + "..." + text[-18:]


class _Context:
    """The model/accelerator a row refers to: its own columns, else the command's options."""

    def __init__(self, model: str | None, accelerator: str, devices: int) -> None:
        self.model, self.accelerator, self.devices = model, accelerator, devices
        self._costs: dict = {}

    def cost(self, model: str | None, accelerator: str | None, devices: int, where: str):
        name = model or self.model
        if name is None:
            raise ProfileError(
                "no model for this row", where=where, fix="add a 'model' column or pass --model"
            )
        if model and self.model and model.strip().lower() != self.model.strip().lower():
            raise ProfileError(
                f"model '{model}' does not match --model {self.model}",
                where=where,
                fix="drop --model to fit rows of several models, or fix the row",
            )
        acc = accelerator or self.accelerator
        key = (name.lower(), acc.lower(), devices)
        if key not in self._costs:
            m = _lookup("model", name, where)
            dev = _lookup("accelerator", acc, where)
            self._costs[key] = _unit_cost(m, dev, devices)
        return self._costs[key]


def read_csv_profile(path: Path, ctx: _Context) -> list[Measurement]:
    _check_size(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # a BOM is not a column name
            reader = csv.DictReader(f)
            header = [h.strip() for h in (reader.fieldnames or [])]
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ProfileError(
            f"cannot read CSV ({e})", where=str(path), fix="check the file"
        ) from None
    missing = [c for c in ("phase", "ms") if c not in header]
    if not ({"tokens", "batch"} & set(header)):
        missing.append("tokens or batch")
    if missing:
        raise ProfileError(
            f"missing column(s) {', '.join(missing)}",
            where=str(path),
            fix="the header needs " + ", ".join(CSV_COLUMNS) + " (model, accelerator optional)",
        )
    out = []
    for i, raw in enumerate(rows, start=2):  # line 1 is the header
        row = {(k or "").strip(): v for k, v in raw.items()}
        where = f"{path}:{i}"
        phase = (row.get("phase") or "").strip().lower()
        devices = _number(row, "devices", where, default=ctx.devices)
        _check_range("devices", devices, 1, MAX_DEVICES, where)
        ms = _number(row, "ms", where, integer=False)
        row_model = (row.get("model") or "").strip() or None
        cost = ctx.cost(row_model, (row.get("accelerator") or "").strip() or None, devices, where)
        tag = f"{row_model} " if row_model else ""
        context = _number(row, "context", where, default=0, positive=False)
        if phase in ("prefill", "ttft"):  # ttft: client-side, one request's overhead too
            n = _number(row, "tokens", where)
            a, b, c = prefill_steps(cost, n, context)
            client = float(phase == "ttft")
            label = f"{tag}{phase} {n}+{context}"
            steps = [(a, b, 0, c)]
            out.append(_measurement(phase, ms, where, label, steps, client, client * (n + context)))
        elif phase == "decode":
            bsz = _number(row, "batch", where)
            a, b, c = decode_steps(cost, bsz, context)
            out.append(
                _measurement(
                    "decode", ms, where, f"{tag}decode b={bsz} ctx={context}", [(a, b, 1, c)]
                )
            )
        else:
            raise ProfileError(
                f"phase must be prefill, ttft or decode, got {phase!r}",
                where=where,
                fix="fix the row",
            )
    return out


def read_vllm_json(path: Path, ctx: _Context, lengths: dict) -> list[Measurement]:
    """Rows from ``vllm bench serve --save-result`` (at --max-concurrency 1) or
    ``vllm bench latency --output-json`` (with the run's --input-len/--output-len/--batch-size)."""
    _check_size(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError) as e:  # JSONDecodeError, 5,000 digits
        raise ProfileError(
            f"cannot read JSON ({_show(str(e))})", where=str(path), fix="check the file"
        ) from None
    except RecursionError:
        raise ProfileError(
            "cannot read JSON (nested too deeply)", where=str(path), fix="check the file"
        ) from None
    if not isinstance(data, dict):
        raise ProfileError("not a vLLM result object", where=str(path), fix="check the file")
    model = data.get("model_id") or None
    if model is not None and not isinstance(model, str):
        raise ProfileError(
            f"'model_id' is {_show(model)}, not a model name",
            where=str(path),
            fix="give the Hugging Face id as a string, or pass --model",
        )
    if model and ctx.model:
        from prefixbench.catalog import get_model

        hf = get_model(ctx.model).hf_id.lower()
        if hf and model.lower().rstrip("/").split("/")[-1] != hf.split("/")[-1]:
            raise ProfileError(
                f"result is for '{model}', not --model {ctx.model} ({hf})",
                where=str(path),
                fix="pass the --model the benchmark ran",
            )
        model = None
    elif model:
        model = _catalog_name(model, path)
    if "mean_ttft_ms" in data:
        return _serve_rows(data, path, ctx, model)
    if "avg_latency" in data:
        return _latency_rows(data, path, ctx, model, lengths)
    raise ProfileError(
        "neither a `vllm bench serve` nor a `vllm bench latency` result",
        where=str(path),
        fix="give the JSON of --save-result (serve) or --output-json (latency), or a CSV",
    )


def _catalog_name(hf_id: str, path: Path) -> str:
    from prefixbench.catalog import MODELS

    tail = hf_id.lower().rstrip("/").split("/")[-1]
    for m in MODELS.values():
        if m.hf_id and m.hf_id.lower().split("/")[-1] == tail:
            return m.name
    raise ProfileError(
        f"model '{hf_id}' is not in the catalog", where=str(path), fix="pass --model (a name or "
        "config.json path)"
    )  # fmt: skip


def _field(data: dict, key: str, path: Path) -> float:
    v = data.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise ProfileError(
            f"'{key}' missing or not a positive number", where=str(path), fix="check the result"
        )
    return float(v)


def _serve_rows(data: dict, path: Path, ctx: _Context, model) -> list[Measurement]:
    conc = data.get("max_concurrency")
    if conc != 1:
        raise ProfileError(
            f"max_concurrency is {conc!r}: TTFT and TPOT then include queueing and mixed batches",
            where=str(path),
            fix="rerun `vllm bench serve` with --max-concurrency 1 for calibration",
        )
    done = _field(data, "completed", path)
    n_in = _field(data, "total_input_tokens", path) / done
    n_out = _field(data, "total_output_tokens", path) / done
    cost = ctx.cost(model, None, ctx.devices, str(path))
    ttft = data.get("median_ttft_ms", data.get("mean_ttft_ms"))
    tpot = data.get("median_tpot_ms", data.get("mean_tpot_ms"))
    ttft = _field({"ttft": ttft}, "ttft", path)
    tpot = _field({"tpot": tpot}, "tpot", path)
    a, b, c = prefill_steps(cost, round(n_in), 0)
    label = f"TTFT {n_in:.0f} tokens"  # client-side: one request's overhead
    out = [_measurement("ttft", ttft, str(path), label, [(a, b, 0, c)], 1.0, n_in)]
    ctx_mid = n_in + n_out / 2
    a, b, c = decode_steps(cost, 1, ctx_mid)
    out.append(_measurement("decode", tpot, str(path), f"TPOT ctx {ctx_mid:.0f}", [(a, b, 1, c)]))
    return out


def _latency_rows(data: dict, path: Path, ctx: _Context, model, lengths) -> list[Measurement]:
    merged = {k: data.get(k, lengths.get(k)) for k in ("input_len", "output_len", "batch_size")}
    missing = [k for k, v in merged.items() if v is None]
    if missing:
        flags = ", ".join("--" + k.replace("_", "-") for k in missing)
        raise ProfileError(
            f"a `vllm bench latency` result does not record {', '.join(missing)}",
            where=str(path),
            fix=f"pass {flags} as given to `vllm bench latency`",
        )
    for k, v in merged.items():
        if isinstance(v, float) and v.is_integer():
            v = merged[k] = int(v)
        _check_range(k, v, 1, MAX_TOKENS, str(path))
    n_in, n_out, bsz = (int(merged[k]) for k in ("input_len", "output_len", "batch_size"))
    cost = ctx.cost(model, None, ctx.devices, str(path))
    a, b, c = prefill_steps(cost, n_in, 0, requests=bsz)
    da, db, dc = decode_steps(cost, bsz, n_in + 1, n_out - 1)
    ms = _field(data, "avg_latency", path) * 1e3
    label = f"latency b={bsz} in={n_in} out={n_out}"
    return [_measurement("sequence", ms, str(path), label, [(a, b, 0, c), (da, db, 1, dc)])]


# ---------------------------------------------------------------- the fit


@dataclass
class Fit:
    efficiency: Efficiency
    constrained: list[str]  # parameters the data determines
    kept: list[str]  # parameters no row depends on (left at the start value)
    mape: dict[str, float]  # per kind, fitted
    mape_start: dict[str, float]  # per kind, at the start efficiency
    rows: int
    iterations: int


def _design(ms: list[Measurement], theta: np.ndarray) -> tuple[np.ndarray, bytes]:
    """Columns (x_p, x_d, y, o_p, o_d, o_r, c_tok) of the linear model under the regimes that bind at
    ``theta``, and a signature of those regimes (which term binds in every step)."""
    x = np.array([theta[0], theta[1]])
    rows, sig = [], []
    for m in ms:
        comp = m.a * x[m.phase] >= m.b * theta[2]
        sig.append(np.packbits(comp).tobytes())
        rows.append(
            [
                1e3 * m.a[comp & (m.phase == 0)].sum(),
                1e3 * m.a[comp & (m.phase == 1)].sum(),
                1e3 * m.b[~comp].sum(),
                float((m.phase == 0).sum()),
                float((m.phase == 1).sum()),
                m.requests,
                m.prompt_tokens / 1e3,
            ]
        )
    return np.array(rows), b"|".join(sig)


def _active(design: np.ndarray, params: tuple[str, ...]) -> np.ndarray:
    """Indices of the parameters some row depends on, among those to fit."""
    allowed = np.array([p in params for p in PARAMS])
    return np.flatnonzero((np.abs(design).sum(axis=0) > 0) & allowed)


def _theta(eff: Efficiency) -> np.ndarray:
    return np.array(
        [1 / eff.mfu_prefill, 1 / eff.mfu_decode, 1 / eff.mbu,
         eff.prefill_overhead_ms, eff.decode_overhead_ms, eff.request_overhead_ms,
         eff.prompt_overhead_us]
    )  # fmt: skip


def _efficiency(theta: np.ndarray) -> Efficiency:
    from pydantic import ValidationError

    values = {
        "mfu_prefill": min(1.0, 1 / theta[0]),
        "mfu_decode": min(1.0, 1 / theta[1]),
        "mbu": min(1.0, 1 / theta[2]),
        "prefill_overhead_ms": max(0.0, theta[3]),
        "decode_overhead_ms": max(0.0, theta[4]),
        "request_overhead_ms": max(0.0, theta[5]),
        "prompt_overhead_us": max(0.0, theta[6]),
    }
    try:
        return Efficiency(**values)
    except ValidationError as e:
        name = str(e.errors()[0]["loc"][0])
        f = Efficiency.model_fields[name].metadata
        lo = next(m.ge for m in f if hasattr(m, "ge"))
        hi = next(m.le for m in f if hasattr(m, "le"))
        raise ProfileError(
            f"the fit gives {name} = {values[name]:.6g}, outside its range {lo} to {hi}",
            where="calibrate fit",
            fix="check the step times are in milliseconds and belong to this model, "
            "accelerator and device count",
        ) from None


def _distinct(ms: list[Measurement]) -> int:
    """Different steps among the rows: a repeated measurement of one step adds no point."""
    return len({(m.kind, m.a.tobytes(), m.b.tobytes(), m.phase.tobytes()) for m in ms})


def _mape(ms: list[Measurement], eff: Efficiency) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for m in ms:
        by.setdefault(m.kind, []).append(abs(m.predict(eff) / m.ms - 1))
    return {k: 100 * float(np.mean(v)) for k, v in by.items()}


def fit(
    ms: list[Measurement],
    start: Efficiency | None = None,
    max_iter: int = 100,
    params: tuple[str, ...] = DEFAULT_PARAMS,
) -> Fit:
    """Least-squares fit of the efficiency block (relative errors), as the module says;
    only ``params`` are fitted, the others keep their ``start`` values."""
    from scipy.optimize import lsq_linear

    start = start or Efficiency()
    if _distinct(ms) < 2:
        raise ProfileError(
            f"too few points to fit: {_distinct(ms)} distinct step(s) in {len(ms)} row(s)",
            where="calibrate fit",
            fix="measure at least one step per parameter (2 or more different steps)",
        )
    meas = np.array([m.ms for m in ms])
    attn = np.array([m.attention_ms() for m in ms])  # fixed: not a fitted parameter
    theta = _theta(start)
    lower = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    seen: set[bytes] = set()
    it = 0
    while it < max_iter:
        it += 1
        design, regimes = _design(ms, theta)
        active = _active(design, params)
        fixed = np.setdiff1d(np.arange(len(PARAMS)), active)
        if (n := _distinct(ms)) < active.size:  # a repeated row is one point, not two
            names = ", ".join(PARAMS[i] for i in active)
            raise ProfileError(
                f"too few points to fit: {n} distinct steps for {active.size} parameters ({names})",
                where="calibrate fit",
                fix="add measurements (both phases, short and long)",
            )
        w = design[:, active] / meas[:, None]  # relative residuals
        rhs = 1.0 - (design[:, fixed] @ theta[fixed] + attn) / meas
        sol = lsq_linear(w, rhs, bounds=(lower[active], np.inf), method="bvls", tol=1e-15)
        theta = theta.copy()
        theta[active] = sol.x
        if _design(ms, theta)[1] == regimes or regimes in seen:
            break  # the regimes the solution implies are those it was solved under
        seen.add(regimes)
    design, _ = _design(ms, theta)
    active = [PARAMS[i] for i in _active(design, params)]
    eff = _efficiency(theta)
    return Fit(
        efficiency=eff,
        constrained=active,
        kept=[p for p in PARAMS if p not in active],
        mape=_mape(ms, eff),
        mape_start=_mape(ms, start),
        rows=len(ms),
        iterations=it,
    )


# ---------------------------------------------------------------- the command's library call


def read_profiles(
    paths: list[str],
    model: str | None = None,
    accelerator: str = "h100-sxm",
    devices: int = 1,
    lengths: dict | None = None,
) -> list[Measurement]:
    _check_range("--devices", devices, 1, MAX_DEVICES, "calibrate")
    ctx = _Context(model, accelerator, devices)
    out: list[Measurement] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ProfileError("file not found", where=str(path), fix="check the path")
        if path.suffix.lower() == ".json":
            out += read_vllm_json(path, ctx, lengths or {})
        else:
            out += read_csv_profile(path, ctx)
    return out


def write_efficiency(path: str | Path, result: Fit, sources: list[str]) -> Path:
    """Write the fitted block as YAML via a temp file and an atomic rename."""
    import yaml

    path = Path(path)
    e = result.efficiency
    doc = {
        "efficiency": {k: round(float(getattr(e, k)), 6) for k in PARAMS},
        "fit": {
            "sources": sources,
            "rows": result.rows,
            "mape_percent": {k: round(v, 3) for k, v in result.mape.items()},
            "kept_at_default": result.kept,
        },
    }
    text = (
        "# Written by `prefixbench calibrate`. Use it with `prefixbench cost --efficiency FILE`\n"
        "# or in a scenario as `efficiency: {from: FILE}` (relative to the scenario file).\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise ProfileError(
            f"cannot write ({e.strerror})", where=str(path), fix="choose a writable --out path"
        ) from None
    return path


def fit_params(names: list[str] | None) -> tuple[str, ...]:
    """The parameters ``calibrate --fit`` names (parameter names, ``default`` or ``all``),
    in PARAMS order; none given: DEFAULT_PARAMS."""
    if not names:
        return DEFAULT_PARAMS
    chosen: set[str] = set()
    for n in names:
        if n in FIT_SETS:
            chosen.update(FIT_SETS[n])
        elif n in PARAMS:
            chosen.add(n)
        else:
            raise ProfileError(
                f"unknown parameter {n!r}",
                where="--fit",
                fix=did_you_mean(n, [*PARAMS, *FIT_SETS]),
            )
    return tuple(p for p in PARAMS if p in chosen)


def calibrate(
    paths: list[str],
    model: str | None = None,
    accelerator: str = "h100-sxm",
    devices: int = 1,
    lengths: dict | None = None,
    out: str | None = None,
    params: list[str] | None = None,
) -> dict:
    """Read the profiles, fit ``params`` (fit_params: default the six of DEFAULT_PARAMS),
    optionally write the block; a plain dict for the CLI."""
    chosen = fit_params(params)
    ms = read_profiles(paths, model, accelerator, devices, lengths)
    result = fit(ms, params=chosen)
    if out:
        write_efficiency(out, result, [str(p) for p in paths])
    eff = result.efficiency
    return {
        "efficiency": {k: float(getattr(eff, k)) for k in PARAMS},
        "constrained": result.constrained,
        "kept_at_default": result.kept,
        "mape_percent": result.mape,
        "mape_percent_at_defaults": result.mape_start,
        "rows": [
            {
                "where": m.where,
                "kind": m.kind,
                "what": m.label,
                "measured_ms": m.ms,
                "fitted_ms": m.predict(eff),
                "default_ms": m.predict(Efficiency()),
            }
            for m in ms
        ],
        "out": out,
    }
