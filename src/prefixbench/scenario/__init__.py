"""What the user asks for: the Pydantic scenario models (`models`), presets, YAML files and
`--set` overrides (`loader`), and docs/scenarios.md generated from the models (`docgen`).

May import: `physics`, `catalog`, `registry`, `support`, `errors`.
"""
