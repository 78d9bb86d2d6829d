"""The scheduler profile the model runs: which filter plugins run and each score plugin's weight,
the default profile's or one read from a KubeSchedulerConfiguration file. Pure, no I/O.

A KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`) names its profiles' plugins by
extension point: a profile starts from the default plugins, `disabled` takes some away (`*` all
of that point's), `enabled` adds them back, a score plugin with its `weight` (1 when unset or 0, as
the framework runtime weighs it); `multiPoint` speaks for every point a plugin implements. The model reads the filter and score points (and multiPoint) of the profile named
`default-scheduler`, or the only one. What it cannot honour is refused by name: a plugin it does
not model enabled, or `pluginConfig` arguments (scoring strategies, spread defaults) it would
silently ignore.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

FILTERS = ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
           "PodTopologySpread", "InterPodAffinity", "DynamicResources")
"""The default profile's filter plugins the model runs, in the default profile's order."""
WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2, "InterPodAffinity": 2,
           "NodeResourcesFit": 1, "BalancedAllocation": 1, "ImageLocality": 1}
"""The default profile's score plugins the model runs, with their default weights."""
UNMODELLED = ("VolumeBinding", "VolumeRestrictions", "VolumeZone", "NodeVolumeLimits", "EBSLimits", "GCEPDLimits",
              "AzureDiskLimits", "NodeDeclaredFeatures", "SchedulingGates", "PrioritySort", "DefaultBinder",
              "DefaultPreemption")
"""Default plugins the model leaves out (README, "Simulating your fleet"): disabling them changes nothing."""
API_VERSION, KIND = "kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"


class ProfileError(ValueError):
    """A scheduler configuration the model cannot run, with what and where."""


@dataclass(frozen=True)
class Profile:
    name: str = "default-scheduler"
    filters: tuple[str, ...] = FILTERS
    weights: Mapping[str, int] = field(default_factory=lambda: dict(WEIGHTS))

    def describe(self) -> str:
        """e.g. "default-scheduler: ImageLocality off, NodeResourcesFit ×5"."""
        changes = [f"{name} filter off" for name in FILTERS if name not in self.filters]
        changes += [f"{name} off" for name in WEIGHTS if name not in self.weights]
        changes += [f"{name} ×{w}" for name, w in self.weights.items() if WEIGHTS.get(name) != w]
        return f"{self.name}: " + (", ".join(changes) if changes else "the default plugins and weights")


DEFAULT_PROFILE = Profile()


def _names(entries: object, where: str) -> list[tuple[str, int | None]]:
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                for e in entries):
        raise ProfileError(f"{where}: a list of {{name: ..., weight: ...}} entries")
    found = []
    for entry in entries:
        weight = entry.get("weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int) or weight < 0):
            raise ProfileError(f"{where}: {entry['name']} weight must be a non-negative integer, got {weight!r}")
        found.append((entry["name"], weight))
    return found


def _point(plugins: Mapping[str, Any], point: str, where: str) -> tuple[list[tuple[str, int | None]],
                                                                          list[tuple[str, int | None]]]:
    spec = plugins.get(point) or {}
    if not isinstance(spec, dict):
        raise ProfileError(f"{where}.{point}: a mapping with enabled and disabled")
    return _names(spec.get("enabled"), f"{where}.{point}.enabled"), _names(spec.get("disabled"), f"{where}.{point}.disabled")


def profile_from_config(text: str) -> Profile:
    """The profile a KubeSchedulerConfiguration document sets up, as the model can run it."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ProfileError(f"not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(document, dict):
        raise ProfileError("a KubeSchedulerConfiguration must be a YAML mapping")
    if document.get("kind") != KIND or document.get("apiVersion") != API_VERSION:
        raise ProfileError(f"expected kind {KIND} and apiVersion {API_VERSION}, got kind {document.get('kind')!r} "
                           f"and apiVersion {document.get('apiVersion')!r}")
    profiles = document.get("profiles") or [{}]
    if not isinstance(profiles, list) or not all(isinstance(p, dict) for p in profiles):
        raise ProfileError("profiles: a list of profiles")
    chosen = next((p for p in profiles if p.get("schedulerName", "default-scheduler") == "default-scheduler"),
                  profiles[0] if len(profiles) == 1 else None)
    if chosen is None:
        raise ProfileError("no profile is named default-scheduler, and there are several: the model runs one")
    index = profiles.index(chosen)
    where = f"profiles[{index}]"
    configured = [str(c.get("name")) for c in chosen.get("pluginConfig") or [] if isinstance(c, dict)]
    if configured:
        raise ProfileError(f"{where}.pluginConfig sets arguments for {', '.join(configured)}: the model runs "
                           "every plugin with its default arguments; remove them to simulate with the defaults")
    plugins = chosen.get("plugins") or {}
    if not isinstance(plugins, dict):
        raise ProfileError(f"{where}.plugins: a mapping of extension points")
    filters, weights = list(FILTERS), dict(WEIGHTS)
    for point in ("multiPoint", "filter", "score"):  # multiPoint first: the points' own lists refine it
        enabled, disabled = _point(plugins, point, f"{where}.plugins")
        for name, _ in disabled:
            if name == "*":
                if point in ("multiPoint", "filter"):
                    filters.clear()
                if point in ("multiPoint", "score"):
                    weights.clear()
                continue
            if name in filters and point in ("multiPoint", "filter"):
                filters.remove(name)
            if point in ("multiPoint", "score"):
                weights.pop(name, None)
        for name, weight in enabled:
            if name not in FILTERS and name not in WEIGHTS:
                what = "is left out of the model" if name in UNMODELLED else "is not a plugin the model knows"
                raise ProfileError(f"{where}.plugins.{point}.enabled: {name} {what}")
            if name in FILTERS and point != "score" and name not in filters:
                filters.append(name)
            if name in WEIGHTS and point != "filter":
                weights[name] = weight or 1  # as the framework runtime weighs an unset or 0 weight
    ordered = tuple(name for name in FILTERS if name in filters)
    return Profile(str(chosen.get("schedulerName", "default-scheduler")), ordered, weights)
