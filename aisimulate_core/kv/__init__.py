"""KV cache models: the paged block pool (vLLM / TensorRT-LLM) and block hashing."""

from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.kv.hashing import seq_hashes, seq_hashes_runs

__all__ = ["BlockPool", "seq_hashes", "seq_hashes_runs"]
