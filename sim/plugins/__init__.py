"""The scheduler model's plugins, one module each, and the registry that names them. Pure, no I/O."""

from __future__ import annotations

from sim.framework import Base
from sim.plugins.balanced_allocation import BalancedAllocation
from sim.plugins.dynamic_resources import DynamicResources
from sim.plugins.image_locality import ImageLocality
from sim.plugins.inter_pod_affinity import InterPodAffinity
from sim.plugins.node_affinity import NodeAffinity
from sim.plugins.node_name import NodeName
from sim.plugins.node_ports import NodePorts
from sim.plugins.node_resources_fit import NodeResourcesFit
from sim.plugins.node_unschedulable import NodeUnschedulable
from sim.plugins.pod_topology_spread import PodTopologySpread
from sim.plugins.taint_toleration import TaintToleration

REGISTRY: dict[str, Base] = {plugin.name: plugin for plugin in (
    NodeUnschedulable(), NodeName(), TaintToleration(), NodeAffinity(), NodePorts(), NodeResourcesFit(),
    PodTopologySpread(), InterPodAffinity(), DynamicResources(), BalancedAllocation(), ImageLocality())}
"""Plugin name → the plugin. Plugins keep no state of their own (a cycle's state is in `Cycle.state`)."""
