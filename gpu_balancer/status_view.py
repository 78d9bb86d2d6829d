"""Render fleet heat as a table for people or JSON for scripts. Pure, no I/O."""

from __future__ import annotations

import json

from scoring.heat import FleetHeat, NodeHeat, Tier

_COLOURS = {Tier.COOL: "\033[32m", Tier.WARM: "\033[33m", Tier.HOT: "\033[31m", Tier.UNHEALTHY: "\033[35m"}
_RESET = "\033[0m"


def heat_as_dict(fleet: FleetHeat, warnings: tuple[str, ...] = ()) -> dict:
    return {
        "taken_at": fleet.taken_at.isoformat(),
        "stale": fleet.stale,
        "age_seconds": round(fleet.age_seconds, 1),
        "nodes": [_node_as_dict(node) for node in fleet.nodes],
        "warnings": list(warnings),
    }


def _node_as_dict(node: NodeHeat) -> dict:
    return {
        "name": node.name,
        "gpus": node.gpus,
        "gpus_free": node.gpus_free,
        "gpu_util": round(node.gpu_util, 1),
        "max_gpu_util": round(node.max_gpu_util, 1),
        "memory_used_fraction": None if node.memory_used_fraction is None else round(node.memory_used_fraction, 3),
        "max_temperature_c": node.max_temperature_c,
        "power_w": None if node.power_w is None else round(node.power_w, 1),
        "tier": str(node.tier),
        "reasons": list(node.reasons),
        "signals": list(node.signals),
        "serving_pressure": None if node.serving_pressure is None else round(node.serving_pressure, 3),
        "partial": node.partial,
    }


def heat_as_json(fleet: FleetHeat, warnings: tuple[str, ...] = ()) -> str:
    return json.dumps(heat_as_dict(fleet, warnings), indent=2)


def heat_as_table(fleet: FleetHeat, *, colour: bool = False) -> str:
    header = ("NODE", "GPUS", "FREE", "UTIL%", "MAX%", "MEM%", "TEMP", "TIER", "REASONS")
    rows = [(n.name, str(n.gpus), str(n.gpus_free), f"{n.gpu_util:.0f}", f"{n.max_gpu_util:.0f}",
             "-" if n.memory_used_fraction is None else f"{n.memory_used_fraction * 100:.0f}",
             "-" if n.max_temperature_c is None else f"{n.max_temperature_c:.0f}",
             str(n.tier) + ("*" if n.partial else ""), "; ".join(n.reasons) or "-") for n in fleet.nodes]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[-1]]
    for node, row in zip(fleet.nodes, rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        if colour:
            cells[7] = f"{_COLOURS[node.tier]}{cells[7]}{_RESET}"
        lines.append("  ".join(cells) + "  " + row[-1])
    counts = {tier: sum(1 for n in fleet.nodes if n.tier is tier) for tier in Tier}
    summary = ", ".join(f"{count} {tier}" for tier, count in counts.items())
    partial = [n for n in fleet.nodes if n.partial]
    if partial:
        missing = sorted({signal for n in partial for signal in n.missing_signals})
        lines.append(f"\n* {len(partial)} node(s) judged on partial telemetry (unknown: {', '.join(missing)}); "
                     "'-' marks an unknown figure.")
    freshness = "STALE — no steering" if fleet.stale else "fresh"
    lines.append(f"\n{len(fleet.nodes)} GPU nodes: {summary}. Telemetry {fleet.age_seconds:.0f}s old ({freshness}), "
                 f"taken {fleet.taken_at.isoformat(timespec='seconds')}.")
    return "\n".join(lines)
