"""The import's flag table and the answer as launch flags (docs/import.md)."""

from __future__ import annotations

import shlex

from rich.table import Table

from .tables import _cell, safe_text


def import_table(rows, title: str) -> Table:
    """One row per flag: which command, the flag, where it went, and why (folds at 80
    columns rather than cutting a flag)."""
    t = Table(title=safe_text(title), title_justify="left")
    t.add_column("from", no_wrap=True)
    t.add_column("flag", overflow="fold", ratio=3)
    t.add_column("scenario field", overflow="fold", ratio=3)
    t.add_column("note", overflow="fold", ratio=3)
    for r in rows:
        shown = "" if r.status == "mapped" else f"{r.status}: "
        note = (shown + r.note) if r.note else r.status.replace("mapped", "")
        t.add_row(_cell(r.command), _cell(r.flag), _cell(r.field), _cell(note))
    return t


def answer_lines(policy: str, answers, title: str | None = None) -> list[str]:
    """``answers`` (emit.Answer, one per stack) as plain lines: the flags to paste."""
    lines = [title or f"{policy} as launch flags:"]
    for a in answers:
        for line in a.lines():
            lines.append(f"  {a.stack} {line}" if not line.startswith(a.stack) else f"  {line}")
    return lines


def emit_lines(answers) -> list[str]:
    """``--emit``: only the flags, one command per line, each role and any note as a shell
    comment so the output pastes into a script."""
    lines: list[str] = []
    for a in answers:
        if not a.flags:
            lines += [f"# {line}" for line in a.lines()]
            continue
        for role, words in a.flags.items():
            lines += [f"# {a.policy}: {role}", shlex.join(words)]
    return lines
