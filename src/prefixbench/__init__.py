"""prefixbench: simulate disaggregated LLM serving and choose how decode gets a shared prefix."""

__version__ = "0.1.0"
