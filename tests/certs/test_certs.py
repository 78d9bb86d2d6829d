"""Certificates: issued right, rotated at the right time, kept in the cluster, and served."""

from __future__ import annotations

import base64
import socket
import ssl
import stat
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client

from certs.ensure import ensure
from certs.rotation import needs_renewal, plan_bundle
from gpu_balancer.cli import main
from gpu_balancer.local_prometheus import free_port

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)
NAMES = ["gpu-balancer-webhook", "gpu-balancer-webhook.gpu-balancer", "gpu-balancer-webhook.gpu-balancer.svc",
         "gpu-balancer-webhook.gpu-balancer.svc.cluster.local"]


def test_certs_generate_writes_a_verifiable_chain_for_the_service(tmp_path, capsys):
    assert main(["certs", "generate", "--service", "gpu-balancer-webhook", "--namespace", "gpu-balancer",
                 "--out-dir", str(tmp_path)]) == 0
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    serving = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    serving.verify_directly_issued_by(ca)
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == NAMES
    assert serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH])
    assert isinstance(serving.public_key(), ec.EllipticCurvePublicKey) and serving.public_key().curve.name == "secp256r1"
    serving_life = serving.not_valid_after_utc - serving.not_valid_before_utc
    ca_life = ca.not_valid_after_utc - ca.not_valid_before_utc
    assert timedelta(days=360) < serving_life < timedelta(days=370) and ca_life > serving_life
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600


def test_fresh_certificates_are_kept_and_old_ones_renewed():
    first = plan_bundle(None, service="s", namespace="n", now=NOW)
    assert set(first.changes) == {"new CA", "new serving certificate"}
    kept = plan_bundle(first.secret_data(), service="s", namespace="n", now=NOW + timedelta(days=30))
    assert kept.changes == () and kept.serving.certificate == first.serving.certificate
    late = NOW + timedelta(days=250)  # less than a third of a year left on the serving certificate
    assert needs_renewal(first.serving.certificate, late)
    renewed = plan_bundle(first.secret_data(), service="s", namespace="n", now=late)
    assert renewed.changes == ("new serving certificate",)
    assert renewed.ca.certificate == first.ca.certificate, "the CA is kept while valid"
    renewed.serving.certificate.verify_directly_issued_by(first.ca.certificate)


def test_a_replaced_ca_stays_in_the_bundle_so_old_serving_certs_keep_verifying():
    first = plan_bundle(None, service="s", namespace="n", now=NOW)
    much_later = NOW + timedelta(days=365 * 7)  # CA (10 years) has less than a third left
    rotated = plan_bundle(first.secret_data(), service="s", namespace="n", now=much_later)
    assert "new CA" in rotated.changes
    bundle = x509.load_pem_x509_certificates(rotated.ca_bundle)
    assert [c.subject for c in bundle] and first.ca.certificate in bundle and rotated.ca.certificate in bundle


def test_a_serving_certificate_for_another_service_is_replaced():
    first = plan_bundle(None, service="old", namespace="n", now=NOW)
    assert plan_bundle(first.secret_data(), service="new", namespace="n", now=NOW).changes == (
        "new serving certificate",)


WEBHOOK_CONFIG = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                  "metadata": {"name": "gpu-balancer"},
                  "webhooks": [{"name": "pods.gpu-balancer.io", "admissionReviewVersions": ["v1"],
                                "sideEffects": "None", "failurePolicy": "Ignore",
                                "clientConfig": {"service": {"name": "gpu-balancer-webhook",
                                                             "namespace": "gpu-balancer", "path": "/mutate"}}}]}


def test_certs_ensure_creates_the_secret_and_ca_bundle_then_does_nothing(kube):
    api, _ = kube
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    admission.create_mutating_webhook_configuration(WEBHOOK_CONFIG)
    args = dict(namespace="gpu-balancer", service="gpu-balancer-webhook", secret="gpu-balancer-webhook-tls",
                webhook_config="gpu-balancer")
    done = ensure(core, admission, now=NOW, **args)
    assert any("created Secret" in d for d in done) and any("caBundle" in d for d in done)
    secret = core.read_namespaced_secret("gpu-balancer-webhook-tls", "gpu-balancer")
    assert secret.type == "kubernetes.io/tls"
    hook = admission.read_mutating_webhook_configuration("gpu-balancer").webhooks[0]
    assert base64.b64decode(hook.client_config.ca_bundle) == base64.b64decode(secret.data["ca.crt"])
    assert hook.client_config.service.path == "/mutate", "the rest of the configuration is untouched"
    assert ensure(core, admission, now=NOW + timedelta(days=1), **args) == [], "idempotent"
    renewed = ensure(core, admission, now=NOW + timedelta(days=250), **args)
    assert "new serving certificate" in renewed and not any("caBundle" in d for d in renewed)
    new_secret = core.read_namespaced_secret("gpu-balancer-webhook-tls", "gpu-balancer")
    assert new_secret.data["tls.crt"] != secret.data["tls.crt"] and new_secret.data["ca.crt"] == secret.data["ca.crt"]


def test_the_webhook_serves_the_generated_certificate_to_its_service_dns_name(tmp_path):
    from webhook.serve import build_server

    assert main(["certs", "generate", "--service", "gpu-balancer-webhook", "--namespace", "gpu-balancer",
                 "--out-dir", str(tmp_path)]) == 0
    port = free_port()
    from scoring.policy import default_policy

    server, _ = build_server(default_policy(), tls_cert=str(tmp_path / "tls.crt"), tls_key=str(tmp_path / "tls.key"),
                             host="127.0.0.1", port=port, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        for name in NAMES[1:]:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname=name) as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname="evil.example"):
                pass
    finally:
        server.should_exit = True
        thread.join(timeout=10)
