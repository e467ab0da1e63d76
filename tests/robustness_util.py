"""Shared checks of the robustness suite (tests/test_robustness_*.py).

The contract (docs/reliability.md): every invalid input ends in a ``PrefixbenchError`` whose
``str()`` is one printable line naming what went wrong, where (file, file:line, field path or
option) and how to fix it.
"""

from __future__ import annotations

from prefixbench.errors import PrefixbenchError

MAX_LINE = 1200  # long file paths are fine; a message quoting a whole input is not


def assert_clear(err: BaseException, where: str | None = None) -> str:
    """``err`` is a prefixbench error with a one-line message naming what, where and a fix."""
    assert isinstance(err, PrefixbenchError), f"{type(err).__name__} escaped: {err!r}"
    line = str(err)
    assert line == err.line()
    assert line.strip() and line.isprintable() and len(line.splitlines()) == 1, repr(line)
    assert len(line) <= MAX_LINE, f"{len(line)}-character message: {line[:200]}..."
    assert err.what, line
    assert err.where, f"the message does not say where: {line}"
    assert err.fix, f"the message does not say how to fix it: {line}"
    if where is not None:
        assert where in err.where, f"expected {where!r} in where={err.where!r}"
    return line


def assert_one_stderr_line(result, *, code: int | None = None) -> str:
    """A CliRunner result of a bad input: non-zero exit, one stderr line, no traceback."""
    output = (result.stdout or "") + (result.stderr or "")
    assert "Traceback" not in output, output
    assert result.exit_code != 0, output
    if code is not None:
        assert result.exit_code == code, (result.exit_code, output)
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} stderr lines:\n{result.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]
