"""Terminal output: Rich tables laid out to read at 80 columns (`tables`).

May import: the standard library, rich and `registry` only; callers pass plain values.
"""
