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


WIDTH = 80


def shell_lines(words: list[str], indent: str = "", width: int = WIDTH) -> list[str]:
    """A command as shell lines of at most ``width`` columns, joined by `` \\``
    continuations; a quoted JSON word longer than a line breaks after its commas (a newline
    inside single quotes is JSON whitespace), so the text still pastes into a shell."""
    lines, cur = [], indent
    for word in (shlex.quote(w) for w in words):
        if cur.strip() and len(cur) + 1 + len(word) + 2 > width:
            lines.append(cur + " \\")
            cur = indent + "    "
        piece = word if len(cur) + len(word) <= width else _broken_json(word, cur, width)
        cur = (cur + " " + piece) if cur.strip() else cur + piece
        if "\n" in cur:
            *done, cur = cur.split("\n")
            lines += done
    return lines + [cur]


def _broken_json(word: str, cur: str, width: int) -> str:
    """A long quoted word with a newline after each comma where the line would overflow."""
    parts = word.split(",")
    out, line = parts[0], len(cur) + 1 + len(parts[0])
    for part in parts[1:]:
        if line + 1 + len(part) > width:
            out, line = out + ",\n" + part, len(part)
        else:
            out, line = out + "," + part, line + 1 + len(part)
    return out


def _note(text: str, indent: str, width: int = WIDTH) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ")


def answer_lines(policy: str, answers, title: str | None = None) -> list[str]:
    """``answers`` (emit.Answer, one per stack) as lines of at most 80 columns: one note for
    the stacks without an equivalent, else each role's command."""
    lines = _note(title or f"{policy} as launch flags:", "")
    none = [a for a in answers if a.flags is None]
    if none:
        stacks = ", ".join(a.stack for a in none)
        lines += _note(f"{stacks}: no equivalent of {policy}: {none[0].note}", "  ")
    for a in answers:
        if a.flags == {}:
            lines += _note(a.lines()[0], "  ")
        for role, words in (a.flags or {}).items():
            lines += shell_lines([f"{a.stack}-{role}:", *words], "  ")
        if a.flags and a.note:
            lines += _note(a.note, "    ")
    return lines


def emit_lines(answers) -> list[str]:
    """``--emit``: only the commands, each under a ``#`` comment naming policy and role
    (notes are comments too), so the output pastes into a script."""
    lines: list[str] = []
    for a in answers:
        if not a.flags:
            lines += [f"# {line}" for line in _note(a.lines()[0], "", WIDTH - 2)]
            continue
        for role, words in a.flags.items():
            lines += [f"# {a.policy}: {role}", *shell_lines(words)]
        if a.note:
            lines += [f"# {line}" for line in _note(a.note, "", WIDTH - 2)]
    return lines
