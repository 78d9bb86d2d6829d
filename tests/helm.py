"""The real Helm for the chart tests, and the comparison that keeps the chart and the kustomize
install from drifting apart. Does I/O: builds and runs helm and kubectl."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_tool

REPOSITORY = Path(__file__).resolve().parents[1]
CHART = REPOSITORY / "charts" / "gpu-balancer"
DEPLOY = REPOSITORY / "deploy"
BUILD_SCRIPT = REPOSITORY / "controlplane" / "build-helm.sh"
CRD_KINDS = {"Certificate", "Issuer", "ServiceMonitor", "PodMonitor", "PrometheusRule"}

HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
               "helm.sh/chart")
"""Labels the chart adds for Helm's bookkeeping; the kustomize install has no release to name."""


def helm_binary() -> str:
    """The pinned Helm, built from the module proxy on first use. Without Go the test is skipped,
    except under CI, where it fails."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        message = f"controlplane/build-helm.sh exited {result.returncode}: {result.stderr.strip()[-2000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " — under CI Helm is required, not skipped")
        pytest.skip(message)
    return result.stdout.strip().splitlines()[-1]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True, check=check)


def template_args(values: list[Path] = (), settings: list[str] = (), namespace: str = "gpu-balancer") -> list[str]:
    return ["template", "gpu-balancer", str(CHART), "--namespace", namespace,
            *(arg for path in values for arg in ("-f", str(path))),
            *(arg for setting in settings for arg in ("--set", setting))]


def render(values: list[Path] = (), settings: list[str] = (), namespace: str = "gpu-balancer") -> list[dict]:
    """`helm template` of the chart: every object it would install, hooks included."""
    result = helm(*template_args(values, settings, namespace), check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def kustomize(path: Path) -> list[dict]:
    require_tool("kubectl", why="it renders deploy/ (kubectl kustomize)")
    rendered = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def policy_document(objects: list[dict]) -> str:
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and re.fullmatch(
        r"gpu-balancer-policy(-[a-z0-9]{10})?", o["metadata"]["name"])]
    return config["data"]["policy.yaml"]


def _normalised(obj: dict) -> dict:
    """One object as both install paths should agree on it: without Helm's bookkeeping labels and
    annotations, the revision in the certificate Job's name, kustomize's content hash in generated
    names, list order where Kubernetes reads none (volumes, mounts), and the policy compared as the
    BalancerPolicy it decodes to."""
    from scoring.policy import parse_policy

    obj = yaml.safe_load(yaml.safe_dump(obj))
    metadata = obj["metadata"]
    if obj["kind"] == "Job" and "app.kubernetes.io/instance" in metadata.get("labels", {}):
        metadata["name"] = re.sub(r"-\d+$", "", metadata["name"])  # the chart names it by revision
    for label in HELM_LABELS:
        metadata.get("labels", {}).pop(label, None)
    annotations = {k: v for k, v in metadata.get("annotations", {}).items() if not k.startswith("helm.sh/")}
    metadata.pop("annotations", None)
    if annotations:
        metadata["annotations"] = annotations
    if obj["kind"] == "ConfigMap" and "policy.yaml" in obj.get("data", {}):
        metadata["name"] = re.sub(r"-[a-z0-9]{10}$", "", metadata["name"])
        obj["data"]["policy.yaml"] = repr(parse_policy(obj["data"]["policy.yaml"]))

    def walk(node):
        if isinstance(node, dict):
            template_metadata = node.get("metadata") if "spec" in node and "containers" in node.get("spec", {}) else None
            if template_metadata is not None:
                kept = {k: v for k, v in template_metadata.get("annotations", {}).items() if not k.startswith("checksum/")}
                template_metadata.pop("annotations", None)
                if kept:
                    template_metadata["annotations"] = kept
            if "configMap" in node and isinstance(node["configMap"], dict) and "name" in node["configMap"]:
                node["configMap"]["name"] = re.sub(r"^(gpu-balancer-policy)-[a-z0-9]{10}$", r"\1",
                                                   node["configMap"]["name"])
            if isinstance(node.get("expression"), str):  # CEL reads whitespace as YAML folding left it
                node["expression"] = " ".join(node["expression"].split())
            for key in ("volumes", "volumeMounts"):
                if isinstance(node.get(key), list):
                    node[key] = sorted(node[key], key=lambda item: item.get("name", ""))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj)
    return obj


def _key(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _differences(path: str, ours, theirs) -> list[str]:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [d for key in sorted(set(ours) | set(theirs), key=str)
                for d in _differences(f"{path}.{key}", ours.get(key, "<absent>"), theirs.get(key, "<absent>"))]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in _differences(f"{path}[{i}]", a, b)]
    return [] if ours == theirs else [f"{path}: kustomize {ours!r} / chart {theirs!r}"]


def drift(kustomized: list[dict], charted: list[dict]) -> dict[str, list[str]]:
    """What differs between the two installs, by object: `{"Kind/name": [field: a / b, ...]}`, with
    objects only one side has listed under "only in kustomize" and "only in the chart"."""
    ours = {_key(o): o for o in map(_normalised, kustomized)}
    theirs = {_key(o): o for o in map(_normalised, charted)}
    found = {key: _differences(key, ours[key], theirs[key]) for key in sorted(ours.keys() & theirs.keys())}
    found = {key: lines for key, lines in found.items() if lines}
    if only := sorted(ours.keys() - theirs.keys()):
        found["only in kustomize"] = only
    if only := sorted(theirs.keys() - ours.keys()):
        found["only in the chart"] = only
    return found
