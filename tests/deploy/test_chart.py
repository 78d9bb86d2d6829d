"""The Helm chart rendered and linted with the real Helm, validated with kubernetes-validate at the
control plane's Kubernetes version, held to the kustomize install object for object, and refusing
bad values with a message that names the value."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from scoring.policy import parse_policy
from tests.helm import (CHART, CRD_KINDS, DEPLOY, REPOSITORY, drift, helm, kustomize, policy_document, render,
                        template_args)

VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBERNETES = re.search(r"^KUBERNETES=v(\d+\.\d+)\.", (REPOSITORY / "controlplane" / "build.sh").read_text(),
                       re.MULTILINE).group(1) + ".0"
"""The control plane's Kubernetes minor (controlplane/build.sh), as kubernetes-validate names its schemas."""
COMPONENTS = ("cert-manager", "servicemonitor", "nvml-exporter")
AS_THE_COMPONENTS = ["certificates.mode=cert-manager", "serviceMonitor.enabled=true", "serviceMonitor.labels=null",
                     "prometheusRule.enabled=true", "prometheusRule.labels=null", "nvmlExporter.enabled=true",
                     "nvmlExporter.podMonitor.labels=null"]
"""Chart values that install what the base with all three kustomize components installs."""
ONLY_KUSTOMIZE = ["Namespace/gpu-balancer"]
"""The kustomize install creates its namespace (restricted Pod Security); Helm installs into a
namespace it is given (`--create-namespace`, docs/INSTALL.md labels it)."""


def overlay(tmp_path: Path, deploy: Path, components=COMPONENTS) -> Path:
    relative = os.path.relpath(deploy, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [relative],
        "components": [f"{relative}/components/{name}" for name in components]}))
    return tmp_path


def test_the_generated_parts_of_the_chart_are_current():
    """values.schema.json's policy, values.yaml's policy block and files/ follow their sources."""
    result = subprocess.run([sys.executable, str(REPOSITORY / "charts" / "generate.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_chart_and_the_image_carry_the_package_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = re.search(r'^version = "(.+)"', (REPOSITORY / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == chart["appVersion"] == version
    image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    assert image["repository"] == "ghcr.io/gpu-balancer/gpu-balancer" and image["tag"] == ""


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda v: v.stem if v else "defaults")
def test_helm_lint_strict_is_clean(values):
    result = helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda v: v.stem if v else "defaults")
def test_every_rendered_object_is_valid_and_the_policy_decodes(values):
    objects = render([values] if values else [])
    for obj in objects:
        if obj["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    policy = parse_policy(policy_document(objects))
    assert policy.placement.own_namespace == "gpu-balancer"
    (config,) = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["namespaceSelector"]["matchLabels"] == {policy.opt_in.label: policy.opt_in.value}


def test_values_files_reach_the_objects_they_name():
    thanos = render([CHART / "ci" / "thanos-bearer-token-values.yaml"])
    policy = parse_policy(policy_document(thanos))
    assert policy.prometheus.series_selector == '{cluster="prod-eu-1"}'
    assert policy.prometheus.bearer_token_file == "/var/run/secrets/gpu-balancer/prometheus/token"
    (webhook,) = [o for o in thanos if o["kind"] == "Deployment"]
    volumes = {v["name"]: v for v in webhook["spec"]["template"]["spec"]["volumes"]}
    assert volumes["prometheus-token"]["secret"] == {"secretName": "thanos-reader-token",
                                                     "items": [{"key": "token", "path": "token"}]}
    live = render([CHART / "ci" / "descheduler-live-values.yaml"])
    assert not parse_policy(policy_document(live)).descheduler.dry_run
    (loop,) = [o for o in live if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-balancer-descheduler"]
    assert "--every" in loop["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [o for o in live if o["kind"] == "CronJob" and "descheduler" in o["metadata"]["name"]]
    assert {o["metadata"]["name"] for o in live if o["kind"] == "NetworkPolicy"} == {
        "gpu-balancer-webhook", "gpu-balancer-descheduler"}
    stack = render([CHART / "ci" / "kube-prometheus-stack-values.yaml"])
    labelled = {o["kind"] for o in stack if o["metadata"].get("labels", {}).get("release") == "kube-prometheus-stack"}
    assert labelled == {"ServiceMonitor", "PrometheusRule"}
    (dashboard,) = [o for o in stack if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard")]
    assert dashboard["data"]["gpu-balancer.json"] == (DEPLOY / "monitoring" / "grafana-dashboard.json").read_text()


def test_the_chart_installs_what_the_kustomize_base_installs():
    assert drift(kustomize(DEPLOY), render()) == {"only in kustomize": ONLY_KUSTOMIZE}


def test_the_chart_installs_what_the_kustomize_components_install(tmp_path):
    assert drift(kustomize(overlay(tmp_path, DEPLOY)), render(settings=AS_THE_COMPONENTS)) == {
        "only in kustomize": ONLY_KUSTOMIZE}


def test_the_host_process_values_install_what_the_kustomize_example_installs():
    found = drift(kustomize(DEPLOY / "examples" / "host-processes"),
                  render([CHART / "ci" / "host-processes-values.yaml"]))
    # The example leaves caBundle for its user to patch (as the tests do); the values file gives one.
    (ca_bundle,) = found.pop("MutatingWebhookConfiguration/gpu-balancer")
    assert ".clientConfig.caBundle: kustomize ''" in ca_bundle
    assert found == {"only in kustomize": ONLY_KUSTOMIZE}


def test_the_drift_check_fails_when_one_install_path_changes_alone(tmp_path):
    """Change the kustomize base alone (the webhook's timeout, the descheduler's RBAC): the check names it."""
    deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, deploy)
    hook = deploy / "base" / "mutating-webhook.yaml"
    hook.write_text(hook.read_text().replace("timeoutSeconds: 2", "timeoutSeconds: 3"))
    rbac = deploy / "base" / "rbac.yaml"
    rbac.write_text(rbac.read_text().replace('resources: ["pods/eviction"]', 'resources: ["pods/eviction", "pods"]'))
    found = drift(kustomize(deploy), render())
    assert found.pop("only in kustomize") == ONLY_KUSTOMIZE
    assert found == {
        "ClusterRole/gpu-balancer-descheduler": [
            "ClusterRole/gpu-balancer-descheduler.rules[3].resources: kustomize ['pods/eviction', 'pods'] "
            "/ chart ['pods/eviction']"],
        "MutatingWebhookConfiguration/gpu-balancer": [
            "MutatingWebhookConfiguration/gpu-balancer.webhooks[0].timeoutSeconds: kustomize 3 / chart 2"]}
    # And the chart alone: one value that the kustomize base does not set.
    assert drift(kustomize(DEPLOY), render(settings=["webhook.replicas=3"])) == {
        "Deployment/gpu-balancer-webhook": ["Deployment/gpu-balancer-webhook.spec.replicas: kustomize 2 / chart 3"],
        "only in kustomize": ONLY_KUSTOMIZE}


BAD_VALUES = [
    # (what is wrong, --set arguments, what the message must name)
    ("below a minimum", ["webhook.replicas=0"], "/webhook/replicas"),
    ("above a maximum", ["webhook.timeoutSeconds=30"], "/webhook/timeoutSeconds"),
    ("a wrong type", ["webhook.port=https"], "/webhook/port"),
    ("an unknown key", ["webhok.replicas=2"], "webhok"),
    ("an unknown policy field", ["policy.heat.hotUtilPercnt=85"], "hotUtilPercnt"),
    ("a policy percentage over 100", ["policy.heat.hotUtilPercent=150"], "/policy/heat/hotUtilPercent"),
    ("a policy field of the wrong type", ["policy.descheduler.dryRun=maybe"], "/policy/descheduler/dryRun"),
    ("a gauge the product does not read", ["policy.telemetry.busyGauge=DCGM_FI_DEV_GPU_UTIL"],
     "/policy/telemetry/busyGauge"),
    ("the policy's prometheus section, which values.prometheus writes", ["policy.prometheus.url=http://x:9090"],
     "prometheus"),
    ("a Prometheus URL without a scheme", ["prometheus.url=prometheus:9090"], "/prometheus/url"),
    ("an unknown certificate mode", ["certificates.mode=vault"], "/certificates/mode"),
    ("a schedule that is not cron", ["descheduler.schedule=every five minutes"], "/descheduler/schedule"),
    ("a token source without its Secret", ["prometheus.bearerToken.source=secret"],
     "prometheus.bearerToken.secret.name"),
    ("a CA from two places", ["prometheus.ca.configMap=a", "prometheus.ca.secret=b"], "prometheus.ca"),
    ("basic auth without a password", ["prometheus.basicAuth.username=reader"], "prometheus.basicAuth"),
    ("no webhook at all", ["webhook.enabled=false"], "webhook.url"),
    ("a URL with self-managed certificates", ["webhook.enabled=false", "webhook.url=https://10.0.0.1:8443/mutate"],
     "certificates.mode"),
    ("external certificates without a CA", ["certificates.mode=external"], "certificates.caBundle"),
]


@pytest.mark.parametrize(("settings", "named"), [(s, n) for _, s, n in BAD_VALUES], ids=[w for w, _, _ in BAD_VALUES])
def test_bad_values_are_refused_naming_the_value(settings, named):
    result = helm(*template_args(settings=settings), check=False)
    assert result.returncode != 0, result.stdout[:500]
    message = result.stderr.strip()
    assert named in message, message
    assert "goroutine" not in message and len(message.splitlines()) <= 8, message
