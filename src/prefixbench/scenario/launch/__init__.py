"""Launch command lines (vLLM, SGLang, `vllm bench serve`) in and out (docs/import.md).

``importer.import_deployment`` reads them into a scenario; ``emit`` writes a scenario (and
the policy a run recommends) back as the flags that realize it.
"""
