"""The request table every run simulates (`requests.Requests`): synthetic arrivals and
length distributions (`synthetic`, `distributions`), multi-turn sessions (`sessions`), trace
readers and replay (`traces`, `replay`, `controls`), over-length requests (`overlength`) and
the infinite-cache bound (`reuse`).

May import: `scenario`, `physics`, `catalog`, `registry`, `support`, `errors`.
"""
