"""Chrome trace-event JSON, written by compiled code: one event per slice or counter sample.

Each record kind has a byte template (``TEMPLATES``) in which control bytes stand for
fields: the writer copies the template and writes the field there. Times are integer
nanoseconds written as microseconds with exactly three decimals; memory counters are
integer bytes written as GB with nine decimals. Python only writes the process and track
names (a few events).
"""

from __future__ import annotations

import numpy as np

from .jit import entry, jit

PID, TID, TS, DUR, A, B, IT, TRACK, AGB, BGB = range(0x11, 0x1B)

_X = '{"ph":"X","name":"%s","pid":\x11,"tid":\x12,"ts":\x13,"dur":\x14,"args":{%s}}'
_C = '{"ph":"C","name":"%s","pid":\x11,"ts":\x13,"args":{%s}}'
# template ids: the record kinds of layout.Rec, then a decode segment kept whole
TEMPLATES = (
    _X % ("prefill x\x15", '"new_tokens":\x16,"requests":\x15'),
    _X % ("kv", '"bytes":\x16,"request":\x15'),
    _X % ("decode b=\x15", '"batch":\x15,"iteration":\x17'),
    _X % ("recompute b=\x15 +\x16 prefix", '"batch":\x15,"recompute_tokens":\x16'),
    _C % ("decode \x18 kv_used_gb", '"kv_used_gb":\x19')
    + ",\n"
    + _C % ("decode \x18 replica_kv_gb", '"replica_kv_gb":\x1a'),
    _C % ("prefill \x18 queued", '"queued":\x15'),
    _X % ("prefill x\x15 (decodes stalled)", '"tokens":\x16,"requests":\x15'),
    _X % ("mixed step b=\x15 +\x16 prefill", '"batch":\x15,"prefill_tokens":\x16'),
    _X % ("decode x\x16 b=\x15", '"iterations":\x16,"batch":\x15'),
)
SEGMENT_WHOLE = len(TEMPLATES) - 1
MAX_FIELD = 24  # bytes a written field can take


def template_bytes() -> tuple[np.ndarray, np.ndarray]:
    """All templates in one uint8 array, and their offsets (len + 1)."""
    raw = [t.encode() for t in TEMPLATES]
    off = np.zeros(len(raw) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(r) for r in raw])
    return np.frombuffer(b"".join(raw), dtype=np.uint8).copy(), off


@jit
def _digits(buf, pos, v):
    """Write non-negative integer ``v`` in decimal at ``pos``; returns the new position."""
    if v == 0:
        buf[pos] = 48
        return pos + 1
    n = 0
    x = v
    while x > 0:
        x //= 10
        n += 1
    x = v
    for i in range(n - 1, -1, -1):
        buf[pos + i] = 48 + x % 10
        x //= 10
    return pos + n


@jit
def _int(buf, pos, v):
    if v < 0:
        buf[pos] = 45  # '-'
        return _digits(buf, pos + 1, -v)
    return _digits(buf, pos, v)


@jit
def _fixed(buf, pos, v, scale, decimals):
    """``v / scale`` with exactly ``decimals`` decimals (``scale`` = 10**decimals)."""
    if v < 0:
        buf[pos] = 45
        pos += 1
        v = -v
    pos = _digits(buf, pos, v // scale)
    buf[pos] = 46  # '.'
    r = v % scale
    for i in range(decimals, 0, -1):
        buf[pos + i] = 48 + r % 10
        r //= 10
    return pos + decimals + 1


@entry
def write_events(tpl, tpl_off, tpl_id, rows, ns, pid, tid, kv_bytes, buf):
    """Write every row as ``,\\n`` + its event into ``buf``; returns the bytes written."""
    pos = 0
    for r in range(tpl_id.shape[0]):
        buf[pos] = 44
        buf[pos + 1] = 10
        pos += 2
        k = tpl_id[r]
        for i in range(tpl_off[k], tpl_off[k + 1]):
            c = tpl[i]
            if c < PID or c > BGB:
                buf[pos] = c
                pos += 1
            elif c == PID:
                pos = _int(buf, pos, pid[r])
            elif c == TID:
                pos = _int(buf, pos, tid[r])
            elif c == TS:
                pos = _fixed(buf, pos, ns[2 * r], 1000, 3)
            elif c == DUR:
                pos = _fixed(buf, pos, ns[2 * r + 1] - ns[2 * r], 1000, 3)
            elif c == A:
                pos = _int(buf, pos, rows[6 * r + 2])
            elif c == B:
                pos = _int(buf, pos, rows[6 * r + 3])
            elif c == IT:
                pos = _int(buf, pos, rows[6 * r + 5])
            elif c == TRACK:
                pos = _int(buf, pos, rows[6 * r + 1])
            elif c == AGB:
                pos = _fixed(buf, pos, rows[6 * r + 2] * kv_bytes, 1000000000, 9)
            else:
                pos = _fixed(buf, pos, rows[6 * r + 3] * kv_bytes, 1000000000, 9)
    return pos
