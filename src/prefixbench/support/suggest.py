"""'Did you mean …?' for names users type."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name``, or None when nothing is close."""
    known = list(known)
    norm = {k.lower().replace("_", "-"): k for k in known}
    typed = name.lower().replace("_", "-")
    longer = sorted(k for k in norm if typed and k.startswith(typed))
    if len(longer) == 1:  # 'h100' means 'h100-sxm', not the one-letter-off 'h200'
        return norm[longer[0]]
    hits = difflib.get_close_matches(name.lower().replace("_", "-"), list(norm), n=1, cutoff=0.6)
    return norm[hits[0]] if hits else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """A fix hint: the closest name, or the list of known names."""
    known = sorted(known)
    best = closest(name, known)
    if best is not None:
        return f"did you mean '{best}'?"
    return "known: " + ", ".join(known)
