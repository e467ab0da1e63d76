"""Built-in scenario presets (YAML), installed as the ``prefixbench.scenarios`` package data."""
