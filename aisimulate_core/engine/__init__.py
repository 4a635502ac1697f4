"""Engine (scheduler) emulations, one class per backend; each instance is one attention rank.

TensorRT-LLM shares the vLLM core with its own admission policy (GUARANTEED_NO_EVICT).
"""

from .sglang import SglangRank
from .vllm import VllmRank

# backend name -> rank class; a backend missing here is rejected by the spec's support table
ENGINES = {"vllm": VllmRank, "trtllm": VllmRank, "sglang": SglangRank}
