"""Whether a move pays for itself: what moving a pod gains over the policy's horizon against what
restarting it costs. Pure, no I/O.

Both are counted in seconds of the pod's own service, so the traffic it serves multiplies both
sides alike and drops out:
- the cost is its time to ready on the destination — the replacement's image pull where that node
  does not list the image, its model's weights loaded and the server's start — when the pod says
  how big its image and model are (annotations below), else `descheduler.restartCostSeconds`; its
  traffic goes elsewhere or waits meanwhile;
- the gain is `descheduler.paybackHorizonSeconds` times the share of its service the move
  recovers: where its model server reports latency against its peers', the share by which it
  is worse off than they are (moving it where they are recovers that); otherwise the share of
  busy time its node has over the destination's (assumption: a replica's slowdown grows with its
  node's busy share, no faster).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scoring.advice.readiness import PodStartup, StartupCosts, time_to_ready
from scoring.cluster.feasibility import NodeFacts
from scoring.cluster.images import IMAGE_BYTES_ANNOTATION, MODEL_BYTES_ANNOTATION, annotated_bytes
from scoring.ingest.serving import ServingReplica
from scoring.policy import DeschedulerPolicy


@dataclass(frozen=True, slots=True)
class Payback:
    gain_seconds: float
    """Seconds of the pod's service the move recovers over the horizon."""
    restart_seconds: float
    """Seconds of its service the restart costs."""
    horizon_seconds: float

    @property
    def pays(self) -> bool:
        return self.gain_seconds > self.restart_seconds

    def describe(self) -> str:
        """e.g. "gain ~540 s of its service in 30 min > restart ~155 s"."""
        return (f"gain ~{self.gain_seconds:.0f} s of its service in {self.horizon_seconds / 60:g} min "
                f"{'>' if self.pays else '≤'} restart ~{self.restart_seconds:.0f} s")


def restart_seconds(annotations: Mapping[str, str], policy: DeschedulerPolicy, images: tuple[str, ...] = (),
                    destination: NodeFacts | None = None) -> float:
    """The pod's time to ready on `destination` from its image and model sizes where it gives
    them, else the policy's. The annotated bytes are its one image's (`images`, in normal form):
    a destination that lists it pulls nothing. With several images, or no destination, a pull."""
    image, model = annotated_bytes(annotations, IMAGE_BYTES_ANNOTATION), annotated_bytes(annotations, MODEL_BYTES_ANNOTATION)
    if image is None and model is None:
        return policy.restart_cost_seconds
    named = images[0] if len(images) == 1 else ""
    startup = PodStartup(((named, image),) if image else (), model or 0.0)
    costs = StartupCosts(policy.image_pull_bytes_per_second, policy.weight_load_bytes_per_second, policy.startup_seconds,
                         policy.remote_weight_load_bytes_per_second)
    return time_to_ready(startup, destination if named else None, costs).seconds


def recovered_share(source_util: float, destination_util: float, replica: ServingReplica | None) -> float:
    """The share of the pod's service a move recovers, 0–1 (module docstring)."""
    if replica is not None and replica.peer_pressure is not None and replica.pressure > 0:
        return max(0.0, 1.0 - replica.peer_pressure / replica.pressure)
    return min(1.0, max(0.0, (source_util - destination_util) / 100.0))


def payback(annotations: Mapping[str, str], *, source_util: float, destination_util: float,
            replica: ServingReplica | None, policy: DeschedulerPolicy, recovered: float | None = None,
            images: tuple[str, ...] = (), destination: NodeFacts | None = None) -> Payback:
    """The move's payback; `recovered`, where the strategy knows the share of the pod's service
    the move recovers, stands in for the module's estimate. The restart is priced on the
    destination's images (`restart_seconds`)."""
    horizon = policy.payback_horizon_seconds
    share = recovered_share(source_util, destination_util, replica) if recovered is None else recovered
    return Payback(horizon * share, restart_seconds(annotations, policy, images, destination), horizon)

