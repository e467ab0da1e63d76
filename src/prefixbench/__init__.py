"""prefixbench: simulate disaggregated LLM serving and choose how decode gets a shared prefix."""

__version__ = "0.1.0"

from prefixbench.support.allocator import configure as _configure_allocator

# before anything imports numpy: large runs without a page-fault storm (support/allocator.py)
_configure_allocator()
