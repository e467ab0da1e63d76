"""Energy of each step, accumulated per instance (docs/model.md §2.11).

The power cap needs no engine code: it lowers the core clock of a capped instance once,
before the run (``prefixbench.physics.power``), and the instance's FLOP rates carry it. What the
engine adds is the account: each step's dynamic energy

    FLOPs · J/FLOP · max(clock, volt_floor)² + bytes · J/byte

(an operation's switching energy scales with the voltage squared, and the voltage follows
the clock down to ``volt_floor``), where ``clock`` is the capped clock, lowered further with
DVFS on a memory-bound step to the clock at which its compute just fills its memory time
(no latency cost). Per instance: dynamic joules, seconds of steps the cap slowed (compute
bound at the capped clock), and the highest step-average power. The records sit at the end
of ``F``, ``NPW`` floats per instance counted from the end: decode (or colocated) instance
``i`` at ``len(F) - NPW·(i + 1)``, prefill instance ``p`` at ``len(F) - NPW·(D + p + 1)``.
"""

from __future__ import annotations

from .jit import jit
from .layout import (
    C_BR,
    C_CLK,
    C_DVFS,
    C_IDLE,
    C_JB,
    C_JF,
    C_VF,
    IP_ND,
    NPW,
    PW_CAPPED,
    PW_J,
    PW_PEAK,
)


@jit
def power_work(F, at, c0, flops_rate, flops, bytes_, dur):
    """Account one step (or ``k`` closed-form iterations, as totals) of an instance whose
    record starts at ``F[at]`` and whose cost block is ``c0``."""
    tc = flops / flops_rate
    tm = bytes_ / F[c0 + C_BR]
    clk = F[c0 + C_CLK]
    run = clk
    if F[c0 + C_DVFS] > 0.0 and tm > tc:
        run = clk * tc / tm
    v = F[c0 + C_VF]
    if run > v:
        v = run
    e = flops * F[c0 + C_JF] * v * v + bytes_ * F[c0 + C_JB]
    F[at + PW_J] += e
    if clk < 1.0 and tc > tm:
        F[at + PW_CAPPED] += dur
    if dur > 0.0:
        p = F[c0 + C_IDLE] + e / dur
        if p > F[at + PW_PEAK]:
            F[at + PW_PEAK] = p


@jit
def decode_record(F, d):
    """Where decode (or colocated) instance ``d``'s record starts."""
    return F.shape[0] - NPW * (d + 1)


@jit
def prefill_record(IS, F, p):
    """Where prefill instance ``p``'s record starts."""
    return F.shape[0] - NPW * (IS[IP_ND] + p + 1)
