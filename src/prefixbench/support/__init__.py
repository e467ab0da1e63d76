"""Leaf utilities every layer may use: "did you mean" for names users type (`suggest`), safe
opening of user files (`files`), the will-it-fit memory guard (`memcheck`) and the
first-run probe of the compiled engine's cache (`firstrun`).

May import: `prefixbench.errors` and the standard library only.
"""
