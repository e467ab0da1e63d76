"""The physics of one instance: the roofline cost model (`costmodel`), device power and DVFS
(`power`), what hardware a model needs (`sizing`), fitting the efficiency block to measured
step times (`calibrate`) and what `prefixbench cost` prints (`costreport`).

May import: `catalog`, `support`, `errors`; the engine's compiled closed form is the engine's
(`engine.series`), never imported from here. docs/model.md §2 is the model.
"""
