"""Benchmark: the first admission of each constraint signature after a refresh, 5,000 nodes in 20
pools (in process). Shows what `SteeringLedger.prepare` takes off the admission path.

    .venv/bin/python bench/refresh_signatures.py
"""

import sys, time, random, statistics
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parent))
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parent.parent))
import feasible_scale as f
from scoring.advice.placement import index_fleet
from scoring.cluster.feasibility import node_facts, constraints_of
from scoring.cluster.view import ClusterView
from scoring.heat import FleetHeat, NodeHeat, Tier
from webhook.ledger import SteeringLedger
rng = random.Random(1)
objs = [f.node_object(i, 20) for i in range(5000)]
facts = {x.name: x for x in (node_facts(o, f.POLICY) for o in objs)}
def idx():
    return index_fleet(FleetHeat(f.NOW, False, 5.0, tuple(NodeHeat(n, 8, rng.randint(0, 6), u, u, 0.3, 50.0, None, Tier.COOL, ()) for n in facts for u in (rng.uniform(0, 49),))))
cons = [constraints_of(f.pod_object(i, f"p{i}"), f.POLICY) for i in range(20)]
L = SteeringLedger(45)
i1 = idx(); L.prepare(i1, ClusterView(facts, {}, frozenset(), f.NOW))
for c in cons: L.top(i1, f.NOW, need=1, k=5, pod=c)
i2 = idx(); t = time.perf_counter(); L.prepare(i2, ClusterView(facts, {}, frozenset(), f.NOW)); prep = time.perf_counter() - t
firsts = []
for c in cons:
    t = time.perf_counter(); L.top(i2, f.NOW, need=1, k=5, pod=c); firsts.append(time.perf_counter() - t)
print(f"prepare {prep*1e3:.0f} ms; first admission per signature after refresh: median {statistics.median(firsts)*1e6:.0f} us, max {max(firsts)*1e6:.0f} us")
