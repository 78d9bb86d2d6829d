"""How many kube-scheduler plugin-test cases (`tests/sim/upstream_cases.py`) a scheduler model
agrees with, per plugin: this checkout's model, or another checkout's given as its root.

    .venv/bin/python bench/upstream_agreement.py [--code-root /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code-root", type=Path, default=ROOT)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.sim.upstream_cases import CASES  # the cases always come from this checkout

    sys.path.insert(0, str(args.code_root.resolve()))
    for name in [m for m in sys.modules if m.split(".")[0] in ("sim", "scoring", "webhook")]:
        del sys.modules[name]
    from scoring.policy import default_policy
    from sim import explain as explain_module

    takes_context = "context" in inspect.signature(explain_module.explain).parameters
    agreed, total = Counter(), Counter()
    for case in CASES:
        document = {"kind": "List", "items": case["items"]}
        extra = {"context": explain_module.context_from_list(document)} if takes_context else {}
        result = explain_module.explain(case["pod"], explain_module.nodes_from_list(document), snapshot=None,
                                        policy=default_policy(), now=datetime.now(timezone.utc), **extra)
        nodes = {n["name"]: n for n in result["nodes"]}
        if case["score"]:
            got = {k: nodes[k]["scores"].get(case["score"]) if nodes[k]["feasible"] else "infeasible"
                   for k in case["want"]}
        else:
            got = {k: nodes[k]["failed_filter"] for k in case["want"]}
        plugin = case["source"].split("/")[0]
        total[plugin] += 1
        agreed[plugin] += got == case["want"]
    print(f"model at {args.code_root}: {sum(agreed.values())} of {len(CASES)} upstream cases agree")
    for plugin in total:
        print(f"  {plugin:20s} {agreed[plugin]}/{total[plugin]}")


if __name__ == "__main__":
    main()
