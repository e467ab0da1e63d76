"""The first-run note: told from numba's cache index without importing the engine."""

from __future__ import annotations

from prefixbench.support.firstrun import engine_compiled


def test_an_empty_cache_dir_is_a_first_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not engine_compiled()
    (tmp_path / "engine_0a1b").mkdir()
    (tmp_path / "engine_0a1b" / "series.coeffs-163.py311.nbi").write_bytes(b"")
    assert not engine_compiled()  # a helper's index is not the run loop's
    (tmp_path / "engine_0a1b" / "loop.run_disaggregated-62.py311.nbi").write_bytes(b"")
    assert engine_compiled()


def test_compiled_once_the_engine_ran():
    """Once the engine has run (and so cached its machine code), it is no first run."""
    from prefixbench.engine.api import warm_up

    warm_up()
    assert engine_compiled()
