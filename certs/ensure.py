"""`certs ensure`: keep the webhook's TLS Secret and the caBundle current, through the Kubernetes API.

Does I/O with the official `kubernetes` client (APIs injected). Idempotent: a second run with
nothing to renew writes nothing.
"""

from __future__ import annotations

import base64
from datetime import datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from certs.rotation import plan_bundle


def _read_secret(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Secret | None:
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def ensure(core: client.CoreV1Api, admission: client.AdmissionregistrationV1Api, *, namespace: str, service: str,
           secret: str, webhook_config: str, now: datetime) -> list[str]:
    """Create or renew the Secret, then make every webhook's caBundle match. Returns what changed."""
    current = _read_secret(core, namespace, secret)
    existing = {k: base64.b64decode(v) for k, v in ((current.data or {}) if current else {}).items()}
    bundle = plan_bundle(existing, service=service, namespace=namespace, now=now)
    done = list(bundle.changes)
    if bundle.changes or current is None:
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=secret, namespace=namespace,
                                         labels={"app.kubernetes.io/part-of": "gpu-balancer"}),
            type="kubernetes.io/tls",
            data={k: base64.b64encode(v).decode() for k, v in bundle.secret_data().items()})
        if current is None:
            core.create_namespaced_secret(namespace, body)
            done.append(f"created Secret {namespace}/{secret}")
        else:
            # A patch carrying the resourceVersion: the API server refuses it if someone else wrote first.
            core.patch_namespaced_secret(secret, namespace, {
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "data": body.data})
            done.append(f"updated Secret {namespace}/{secret}")
    ca_bundle = base64.b64encode(bundle.ca_bundle).decode()
    for attempt in range(3):
        # Read, modify, write back with the resourceVersion: a concurrent writer makes us retry.
        configuration = admission.read_mutating_webhook_configuration(webhook_config)
        stale = [hook for hook in configuration.webhooks or [] if hook.client_config.ca_bundle != ca_bundle]
        if not stale:
            break
        for hook in stale:
            hook.client_config.ca_bundle = ca_bundle
        webhooks = admission.api_client.sanitize_for_serialization(configuration.webhooks)
        try:
            admission.patch_mutating_webhook_configuration(webhook_config, {
                "metadata": {"resourceVersion": configuration.metadata.resource_version}, "webhooks": webhooks})
        except ApiException as error:
            if error.status == 409 and attempt < 2:
                continue
            raise
        done.append(f"updated caBundle of {', '.join(hook.name for hook in stale)}")
        break
    return done
