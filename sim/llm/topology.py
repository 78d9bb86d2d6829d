"""Where the pods of one multi-pod replica sit against each other, and what it costs (issue 46's
`topology` condition). Pure.

A replica may be more than one pod (`sim.engine.service_pod`):
- a tensor-parallel model over two pods (a LeaderWorkerSet): its ranks all-reduce every layer's
  activations; across NVLink domains over the network, `crossDomainAllreduceStretch` times as
  long (the engine's `Knobs.allreduce_stretch`, so prefill's large messages and decode's small
  ones each pay what they move);
- a prefill/decode pair: each request's KV cache goes from the prefill pod to the decode pod
  before its first token, at the per-token time of their distance.

An NVLink domain is a node's `nvidia.com/gpu.clique` (GPU feature discovery's label for a
multi-node NVLink domain), else the node alone.
"""

from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

import numpy as np

from sim.llm.profile import QUANTILES, RequestMix
from sim.scenario import Topology

CLIQUE_LABEL = "nvidia.com/gpu.clique"
LWS, DISAGGREGATED = "lws", "disaggregated"
"""The two kinds of multi-pod replica."""


def domain_of(node: str, labels: dict[str, str]) -> str:
    return labels.get(CLIQUE_LABEL) or node


def allreduce_stretch(shape: Topology, domains: set[str]) -> float:
    """How much longer a tensor-parallel replica's all-reduces take with its pods in these domains."""
    return shape.cross_domain_allreduce_stretch if shape.enabled and len(domains) > 1 else 1.0


def kv_seconds_per_token(shape: Topology, domains: set[str]) -> float:
    """A prefill/decode pair's handover time per prompt token, its pods in these domains; with the
    condition off, every pair hands over as inside one domain."""
    return shape.kv_seconds_per_token_across if shape.enabled and len(domains) > 1 \
        else shape.kv_seconds_per_token_in_domain


@lru_cache(maxsize=16)
def prompt_quantiles(mix: RequestMix) -> np.ndarray:
    """The prompt length at each of a profile's TTFT quantiles: the handover adds to the TTFT of
    the request whose prompt is that long, longer prompts taken as the slower first tokens
    (assumption: prompt length and TTFT rank alike)."""
    z = np.asarray([NormalDist().inv_cdf((i + 0.5) / QUANTILES) for i in range(QUANTILES)])
    return mix.prompt_median * np.exp(mix.sigma * z)
