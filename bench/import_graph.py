"""The product's shape, measured: import cycles among our modules (function-local imports
included), the longest functions, and which HTTP libraries the pure modules pull in. Reads the
source with `ast` and imports the named modules in child processes; prints figures.

    .venv/bin/python bench/import_graph.py [--longest 10] [--pure scoring.heat,descheduler.plan]
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("scoring", "webhook", "descheduler", "certs", "gpu_balancer", "nvml_exporter")
"""What runs in a cluster; `sim/` is measured for cycles too, not for function length."""
PACKAGES = (*PRODUCT, "sim")
HTTP_LIBRARIES = ("requests", "urllib3", "httpx", "aiohttp", "kubernetes", "fastapi", "starlette", "uvicorn",
                  "prometheus_api_client")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.AST, package: str) -> set[str]:
    """Our modules a module imports anywhere in its body (top level or inside functions)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if not node.level else ".".join([*package.split(".")[:-node.level], node.module])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle or several."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in graph.get(name, ()):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--longest", type=int, default=10)
    parser.add_argument("--pure", default="scoring.heat,descheduler.plan,scoring.advice.placement,webhook.admit")
    args = parser.parse_args()
    trees = {module_name(path): ast.parse(path.read_text(encoding="utf-8"))
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}
    modules = set(trees)
    graph: dict[str, set[str]] = defaultdict(set)
    for name, tree in trees.items():
        for target in imports_of(tree, name):
            while target and target not in modules:  # `from scoring import heat` names a module or a symbol
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    loops = cycles(graph)
    print(f"modules: {len(modules)}, import edges among them: {sum(len(t) for t in graph.values())}")
    print(f"import cycles (function-local imports included): {len(loops)}")
    for loop in loops:
        print("  " + " <-> ".join(loop))
    lengths = []
    for name, tree in trees.items():
        if name.split(".")[0] not in PRODUCT:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    lengths.sort(reverse=True)
    over = [entry for entry in lengths if entry[0] > 80]
    print(f"product functions: {len(lengths)}; over 80 lines: {len(over)}; the longest {args.longest}:")
    for lines, where in lengths[:args.longest]:
        print(f"  {lines:4d}  {where}")
    for module in args.pure.split(","):
        probe = (f"import sys, {module}; print(','.join(sorted(m for m in {HTTP_LIBRARIES!r} "
                 "if m in sys.modules)))")
        loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
        print(f"import {module}: HTTP libraries loaded: {loaded.stdout.strip() or 'none'}")


if __name__ == "__main__":
    main()
