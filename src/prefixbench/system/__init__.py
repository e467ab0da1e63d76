"""A scenario made runnable: names resolved to specs, the request table drawn, the KV budget
sized and the hot set chosen (`runner.prepare`), then one policy simulated
(`runner.simulate_policy`).

May import: `engine`, `workload`, `scenario`, `physics`, `catalog`, `support`, `errors`.
"""
