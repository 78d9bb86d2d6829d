"""A replica's latency and throughput against concurrency, under closed-loop clients. Pure.

As `vllm bench serve --max-concurrency C` measures it: C clients each send a request, wait for
its last token and send the next, `requests_per_client` times (vLLM's benchmark sends 20 × C
prompts in the sweeps quoted in `sim.llm.engine`). With fixed lengths, clients that start
together would stay in lockstep for ever in a model, every prefill landing in the same step; in
a real sweep, client and network jitter spreads them within a few requests. So each client
starts at a random point of the first request's duration (seeded), and each client's first
request is left out of the figures as warm-up: assumption.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from sim.llm.engine import FITTED, Fitted, Knobs, Replica, Request
from sim.llm.hardware import Gpu, Model


@dataclass(frozen=True, slots=True)
class CurvePoint:
    concurrency: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    output_tokens_per_s: float
    ttft_p95_ms: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"concurrency": self.concurrency, "ttft_p50_ms": round(self.ttft_p50_ms, 2),
                "ttft_p95_ms": round(self.ttft_p95_ms, 2), "ttft_p99_ms": round(self.ttft_p99_ms, 2),
                "tpot_p50_ms": round(self.tpot_p50_ms, 3), "output_tokens_per_s": round(self.output_tokens_per_s, 1)}


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


def run_clients(gpu: Gpu, model: Model, *, concurrency: int, prompt_tokens: int, output_tokens: int,
                requests_per_client: int = 20, knobs: Knobs = Knobs(), fitted: Fitted = FITTED, seed: int = 1,
                observe: Callable[[Replica], None] | None = None) -> tuple[Replica, list[Request]]:
    """The replica after the run, and the requests measured (every client's first left out);
    `observe` sees the replica after every step (an exporter sampling it)."""
    replica = Replica(gpu, model, knobs, fitted)
    rng = random.Random(seed)
    # One request alone: how long a cycle lasts, to spread the clients' first requests over it.
    cycle = replica.step_seconds([], [(Request(prompt_tokens, output_tokens, 0.0), prompt_tokens)]) + (
        output_tokens * replica.step_seconds([], []))
    starts = sorted((rng.uniform(0, cycle), client) for client in range(concurrency))
    left = {client: requests_per_client for client in range(concurrency)}
    owner: dict[int, int] = {}
    measured: list[Request] = []

    def send(client: int, at: float) -> None:
        left[client] -= 1
        request = Request(prompt_tokens, output_tokens, at)
        owner[id(request)] = client
        replica.submit(request)

    while starts or replica.running or replica.waiting:
        while starts and (starts[0][0] <= replica.now or not (replica.running or replica.waiting)):
            at, client = starts.pop(0)
            replica.now = max(replica.now, at)
            send(client, replica.now)
        finished = replica.step()
        if observe is not None:
            observe(replica)
        for request in finished:
            client = owner.pop(id(request))
            if left[client] < requests_per_client - 1:  # the client's first request is warm-up
                measured.append(request)
            if left[client]:
                send(client, replica.now)
    if not measured:
        raise ValueError("requests_per_client must be at least 2: the first is warm-up")
    return replica, measured


def closed_loop(gpu: Gpu, model: Model, *, concurrency: int, prompt_tokens: int, output_tokens: int,
                requests_per_client: int = 20, knobs: Knobs = Knobs(), fitted: Fitted = FITTED,
                seed: int = 1) -> CurvePoint:
    _, measured = run_clients(gpu, model, concurrency=concurrency, prompt_tokens=prompt_tokens,
                              output_tokens=output_tokens, requests_per_client=requests_per_client, knobs=knobs,
                              fitted=fitted, seed=seed)
    ttfts = [r.ttft * 1000 for r in measured]
    tokens = sum(r.output_tokens for r in measured)
    span = max(r.done_at for r in measured) - min(r.arrived_at for r in measured)
    return CurvePoint(concurrency, quantile(ttfts, 0.5), quantile(ttfts, 0.99),
                      quantile([r.tpot * 1000 for r in measured], 0.5), tokens / max(span, 1e-9),
                      quantile(ttfts, 0.95))


def serving_curve(gpu: Gpu, model: Model, concurrencies: list[int], *, prompt_tokens: int, output_tokens: int,
                  requests_per_client: int = 20) -> list[CurvePoint]:
    return [closed_loop(gpu, model, concurrency=c, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                        requests_per_client=requests_per_client) for c in concurrencies]
