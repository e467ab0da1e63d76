"""Command lines as the shell would split them: program, positional words and flags.

``vllm serve``, ``python -m sglang.launch_server`` and ``vllm bench serve`` all use argparse,
so a flag is ``--name value``, ``--name=value``, a bare ``--name`` (a switch), or
``--no-name`` (vLLM's ``BooleanOptionalAction`` switches). vLLM's parser also accepts
underscores for dashes (``FlexibleArgumentParser``); both spellings are read here. Which
flags take a value is known from the stack's flag table; a flag the table does not know
takes the next word as its value unless that word is itself a flag.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from prefixbench.errors import ScenarioError

PROGRAMS = {
    ("vllm", "serve"): "vllm",
    ("vllm", "bench", "serve"): "vllm-bench",
    ("sglang", "serve"): "sglang",
    ("-m", "sglang.launch_server"): "sglang",
    ("-m", "sglang_router.launch_server"): "sglang",
    ("-m", "vllm.entrypoints.openai.api_server"): "vllm",
}


@dataclass
class Flag:
    name: str  # canonical, e.g. --tensor-parallel-size
    value: str | None  # None: a bare switch
    given: str  # as typed: -tp, --no-enable-prefix-caching
    negated: bool = False

    def text(self) -> str:
        return self.given if self.value is None else f"{self.given} {self.value}"


@dataclass
class Command:
    stack: str  # vllm, sglang or vllm-bench
    text: str
    positionals: list[str] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)


def split_words(text: str, where: str) -> list[str]:
    """``text`` split as a POSIX shell would (backslash-newline joins lines)."""
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as e:
        raise ScenarioError(
            f"cannot split the command line ({e})", where=where, fix="check the quotes"
        ) from None
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)  # leading VAR=value environment assignments
    return words


def find_program(words: list[str], where: str) -> tuple[str, list[str]]:
    """The stack a command runs and the words after its program name."""
    for i in range(len(words)):
        for key, stack in PROGRAMS.items():
            n = len(key)
            tail = [w.rsplit("/", 1)[-1] if j == 0 else w for j, w in enumerate(words[i : i + n])]
            if tuple(tail) == key:
                return stack, words[i + n :]
    raise ScenarioError(
        f"not a command prefixbench reads: '{' '.join(words[:3])}'",
        where=where,
        fix="give `vllm serve MODEL …`, `python -m sglang.launch_server --model-path MODEL …` "
        "or `vllm bench serve …`",
    )


def _canonical(word: str, aliases: dict[str, str]) -> str:
    name = word if word.startswith("--") else word
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return aliases.get(name, name)


def parse_command(
    text: str,
    where: str,
    aliases: dict[str, dict[str, str]],
    switches: set[str],
    valued: set[str],
    multi: frozenset[str] = frozenset(),
) -> Command:
    """Split ``text`` into its flags. ``aliases``: per stack, spelling → canonical flag;
    ``switches`` take no value, ``valued`` always one, ``multi`` every word up to the next
    flag (argparse ``nargs="+"``, e.g. ``--goodput ttft:500 tpot:50``)."""
    stack, words = find_program(split_words(text, where), where)
    cmd = Command(stack=stack, text=text)
    names = aliases.get(stack, {})
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or _is_number(word):
            cmd.positionals.append(word)
            continue
        given, _, inline = word.partition("=")
        name = _canonical(given, names)
        negated = name.startswith("--no-") and "--" + name[5:] in switches
        if negated:
            cmd.flags.append(Flag("--" + name[5:], None, given, negated=True))
            continue
        if "=" in word:
            cmd.flags.append(Flag(name, inline, given))
        elif name in multi:
            start = i
            while i < len(words) and not words[i].startswith("--"):
                i += 1
            cmd.flags.append(Flag(name, " ".join(words[start:i]) or None, given))
        elif name in switches:
            cmd.flags.append(Flag(name, None, given))
        elif i < len(words) and (name in valued or not words[i].startswith("-")
                                 or _is_number(words[i])):  # fmt: skip
            cmd.flags.append(Flag(name, words[i], given))
            i += 1
        else:
            cmd.flags.append(Flag(name, None, given))
    return cmd


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
