"""Payloads and contexts shared by the aic plugin tests."""

import copy

from aisimulate_core.engine.timing import TimingContext
from aisimulate_core.spec import load_payload

MODEL = "Qwen/Qwen3-32B"
SYSTEM = "h200_sxm"
PATH = "$.spec.engine.rank.timing_model.config"
QWEN = {"model": MODEL, "system": SYSTEM, "backend": "vllm", "tp": 1}


def aic_timing(**config):
    return {"type": "external", "provider": "aic", "config": {**QWEN, **config}}


def payload(rank=None, engine=None, traffic=None, **spec):
    """A synthetic payload whose aggregated rank is timed by AIC for Qwen3-32B on one H200."""
    rank = {"block_size": 16, "timing_model": aic_timing(), **(rank or {})}
    doc = {
        "spec": {
            "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
            "engine": {"rank": rank, **(engine or {})},
            "requests": [],
            **spec,
        },
        "traffic": traffic or {"source_type": "synthetic", "isl": 1024, "osl": 4,
                               "concurrency": 2, "request_count": 4},
    }
    return copy.deepcopy(doc)


def context(rank=None, engine=None, role="aggregated"):
    """The TimingContext build.py gives the aggregated role of such a payload."""
    spec = load_payload(payload(rank, engine), check_support=False).spec
    role_config = spec.engine.role(role)
    return TimingContext(role, PATH, role_config.rank, role_config)
