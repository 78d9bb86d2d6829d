"""Fixtures for the webhook's tests: the cluster view against the API stand-in on loopback."""

from __future__ import annotations

import pytest
from kubernetes import client

from scoring.cluster.view import Binding
from scoring.policy import PlacementPolicy
from tests.kube_api import KubeApi, serve
from webhook.cluster_watch import ClusterWatch

POLICY = PlacementPolicy()


@pytest.fixture
def cluster():
    """(api stand-in, start(**options) → a started ClusterWatch, bindings seen); the pods it
    released (gone after their binding) are in `start.released`."""
    api = KubeApi()
    server, url = serve(api)
    configuration = client.Configuration()
    configuration.host = url
    api_client = client.ApiClient(configuration)
    watches: list[ClusterWatch] = []
    bindings: list[Binding] = []
    released: list[str] = []

    def start(**options) -> ClusterWatch:
        options = {"page_size": 3, "watch_seconds": 2, "backoff": (0.05, 0.2), "grace_seconds": 0.0, **options}
        watch = ClusterWatch(api_client, POLICY, on_binding=bindings.append, on_release=released.append, **options)
        watch.start()
        watches.append(watch)
        return watch

    start.released = released
    yield api, start, bindings
    for watch in watches:
        watch.stop()
    server.shutdown()
    api_client.close()
