"""The one error path: the library raises these; the CLI prints one line and exits non-zero."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped (``\\n``, ``\\x1c``…),
    so a message quoting user input (a key, a path, a trace line) stays on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class PrefixbenchError(Exception):
    """Base class: a problem the user can fix. ``str(err)`` is the one line the CLI prints."""

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.line())

    def __reduce__(self):
        """Pickled with its parts (a worker's error reaches the parent as raised)."""
        return (_rebuild, (type(self), self.what, self.where, self.fix))

    def line(self) -> str:
        head = f"{_short(self.where)}: {_short(self.what)}" if self.where else _short(self.what)
        return one_line(f"{head}; {self.fix}" if self.fix else head)


def _rebuild(cls, what, where, fix):
    err = cls.__new__(cls)
    PrefixbenchError.__init__(err, what, where=where, fix=fix)
    return err


MAX_WHAT = 400  # a message quoting a 5000-digit value or a huge line stays readable


def _short(text: str) -> str:
    if len(text) <= MAX_WHAT:
        return text
    half = MAX_WHAT // 2 - 2
    return f"{text[:half]} ... {text[-half:]}"


class ScenarioError(PrefixbenchError):
    """A scenario, override or sweep file is invalid or names something unknown."""


class CatalogError(ScenarioError):
    """An unknown model, accelerator, link or workload name, or a bad config.json."""


class TraceFormatError(PrefixbenchError):
    """A request trace cannot be parsed."""


class ArtifactError(PrefixbenchError):
    """A results file is missing, corrupt, or has the wrong schema or version."""


class SimulationError(PrefixbenchError):
    """A scenario is well-formed but impossible to simulate (e.g. weights do not fit)."""
