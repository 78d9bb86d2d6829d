"""deploy/ rendered with the real `kubectl kustomize`, validated with kubernetes-validate, and
checked against the safety rules a platform team relies on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.conftest import require_tool
from tests.helm import kustomize

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPONENTS = ["cert-manager", "servicemonitor", "nvml-exporter"]
CRD_KINDS = {"Certificate", "Issuer", "ServiceMonitor", "PodMonitor", "PrometheusRule"}
VERSIONS = ["1.30.0", "1.31.0", kubernetes_validate.latest_version()]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def everything(tmp_path_factory) -> list[dict]:
    overlay = tmp_path_factory.mktemp("overlay", numbered=True)
    relative = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [relative],
        "components": [f"{relative}/components/{name}" for name in COMPONENTS]}))
    return kustomize(overlay)


def find(objects, kind, name=None):
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def pod_templates(objects):
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "Job"):
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_schema_valid(base, everything, version):
    for obj in base + everything:
        if obj["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)


def test_everything_lands_in_the_gpu_balancer_namespace(base):
    namespaced = [o for o in base if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding",
                                                         "MutatingWebhookConfiguration")]
    assert namespaced and all(o["metadata"]["namespace"] == "gpu-balancer" for o in namespaced)
    assert find(base, "Namespace", "gpu-balancer")[0]["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_webhook_configuration_can_never_block_or_reach_system_pods(base):
    (config,) = find(base, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] <= 3
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    selector = hook["namespaceSelector"]
    assert selector["matchLabels"] == {"gpu-balancer.io/enabled": "true"}
    (exclusion,) = selector["matchExpressions"]
    assert exclusion["key"] == "kubernetes.io/metadata.name" and exclusion["operator"] == "NotIn"
    assert {"kube-system", "gpu-balancer"} <= set(exclusion["values"])
    expression = hook["matchConditions"][0]["expression"]
    for needle in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-", "initContainers", "requests", "limits"):
        assert needle in expression
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["path"]) == ("gpu-balancer-webhook", "gpu-balancer",
                                                                       "/mutate")
    assert find(base, "Service", service["name"])


def test_rbac_is_least_privilege(base):
    for role in find(base, "Role") + find(base, "ClusterRole"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
            if "secrets" in rule["resources"]:
                assert role["kind"] == "Role", "Secrets only through a namespaced Role"
                assert "create" in rule["verbs"] or rule.get("resourceNames")
            if "mutatingwebhookconfigurations" in rule["resources"]:
                assert rule.get("resourceNames") == ["gpu-balancer"]
    (descheduler,) = find(base, "ClusterRole", "gpu-balancer-descheduler")
    grants = {(r, v) for rule in descheduler["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("pods/eviction", "create"), ("pods", "list"), ("nodes", "list"), ("events", "create"),
            ("namespaces", "list")} <= grants
    assert not any(v in ("delete", "update", "patch") for r, v in grants if r == "pods")
    (webhook,) = find(base, "ClusterRole", "gpu-balancer-webhook")
    dra = ("resourceslices", "resourceclaims", "resourceclaimtemplates")
    assert {(r, v) for rule in webhook["rules"] for r in rule["resources"] for v in rule["verbs"]} == {
        (r, v) for r in ("nodes", "pods") for v in ("get", "list", "watch")} | {
        (r, v) for r in dra + ("horizontalpodautoscalers",) for v in ("list", "watch")}, \
        "the cluster view reads, nothing more"
    assert all(rule["apiGroups"] == ["autoscaling"] for rule in webhook["rules"]
               if "horizontalpodautoscalers" in rule["resources"])
    assert all(rule["apiGroups"] == ["resource.k8s.io"] for rule in webhook["rules"] if set(rule["resources"]) & set(dra))
    assert {(r, "list") for r in dra} <= grants and not any(v != "list" for r, v in grants if r in dra)
    (binding,) = find(base, "ClusterRoleBinding", "gpu-balancer-webhook")
    assert binding["subjects"][0]["name"] == "gpu-balancer-webhook"


def test_the_webhook_is_highly_available(base):
    (deployment,) = find(base, "Deployment", "gpu-balancer-webhook")
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    spread = spec["template"]["spec"]["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    (pdb,) = find(base, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    container = spec["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_every_pod_is_restricted_read_only_and_sized(everything):
    templates = dict(pod_templates(everything))
    assert {"gpu-balancer-webhook", "gpu-balancer-descheduler", "gpu-balancer-nvml-exporter"} <= set(templates)
    for name, pod in templates.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert security["readOnlyRootFilesystem"] is True, name
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
            assert container["image"].startswith("ghcr.io/gpu-balancer/gpu-balancer:"), name


def test_the_built_in_certificate_jobs_run_certs_ensure(base):
    (job,) = find(base, "Job", "gpu-balancer-certs-init")
    (cron,) = find(base, "CronJob", "gpu-balancer-certs")
    for spec in (job["spec"]["template"]["spec"], cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]):
        args = spec["containers"][0]["args"]
        assert args[:2] == ["certs", "ensure"] and "--webhook-config" in args


def test_the_descheduler_runs_every_five_minutes_one_at_a_time(base):
    (cron,) = find(base, "CronJob", "gpu-balancer-descheduler")
    assert cron["spec"]["schedule"] == "*/5 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


def test_cert_manager_replaces_the_built_in_certificates(everything):
    (config,) = find(everything, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpu-balancer/gpu-balancer-webhook"
    assert not find(everything, "Job", "gpu-balancer-certs-init") and not find(everything, "CronJob", "gpu-balancer-certs")
    (certificate,) = find(everything, "Certificate")
    assert "gpu-balancer-webhook.gpu-balancer.svc" in certificate["spec"]["dnsNames"]


def test_the_policy_configmap_is_a_valid_balancer_policy(base):
    from scoring.policy import parse_policy

    (configmap,) = [o for o in find(base, "ConfigMap") if o["metadata"]["name"].startswith("gpu-balancer-policy")]
    policy = parse_policy(configmap["data"]["policy.yaml"])
    assert policy.placement.own_namespace == "gpu-balancer"


def test_a_fresh_install_runs_the_descheduler_in_dry_run_bound_to_the_webhooks_opt_in(base):
    from scoring.policy import parse_policy

    (configmap,) = [o for o in find(base, "ConfigMap") if o["metadata"]["name"].startswith("gpu-balancer-policy")]
    policy = parse_policy(configmap["data"]["policy.yaml"])
    assert policy.descheduler.dry_run is True
    (cronjob,) = find(base, "CronJob", "gpu-balancer-descheduler")
    args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--live" not in args
    (configuration,) = find(base, "MutatingWebhookConfiguration")
    for webhook in configuration["webhooks"]:
        assert webhook["namespaceSelector"]["matchLabels"] == {policy.opt_in.label: policy.opt_in.value}


def test_the_live_overlay_of_the_install_guide_turns_the_descheduler_live(tmp_path):
    guide = (DEPLOY.parent / "docs" / "INSTALL.md").read_text()
    (patch_line,) = [line.strip() for line in guide.splitlines() if '"value": "--live"' in line]
    relative = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{relative}]\npatches:\n  - target: {{kind: CronJob, name: gpu-balancer-descheduler}}\n"
        f"    {patch_line}\n")
    (cronjob,) = find(kustomize(tmp_path), "CronJob", "gpu-balancer-descheduler")
    assert cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--live"


@pytest.mark.parametrize("rules", ["alerts.rules.yaml", "recording.rules.yaml"])
def test_the_rule_files_load_in_promtool(rules):
    require_tool("promtool", why="it comes with Debian's prometheus package")
    result = subprocess.run(["promtool", "check", "rules", str(DEPLOY / "monitoring" / rules)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_is_grafana_json_covering_the_essentials():
    dashboard = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for needle in ("DCGM_FI_DEV_GPU_UTIL", "gpu_balancer_admissions_total", "gpu_balancer_admission_duration_seconds",
                   "gpu_balancer_snapshot_age_seconds", "gpu-balancer-descheduler",
                   "gpu_balancer_descheduler_evictions_total", "gpu_balancer_descheduler_skips_total",
                   "gpu_balancer_cluster_view_available"):
        assert needle in exprs


def test_the_dashboard_groups_by_the_detected_node_label_and_prefers_the_engine_ratio():
    from scoring import dcgm

    dashboard = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "node_label"]
    for candidate in dcgm.NODE_LABEL_CANDIDATES:
        assert candidate in variable["regex"]
    dcgm_exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"] if "DCGM_FI" in t["expr"]]
    assert dcgm_exprs
    for expr in dcgm_exprs:
        assert "by ($node_label)" in expr and "Hostname" not in expr
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in expr and "or DCGM_FI_DEV_GPU_UTIL" in expr


def test_the_readmes_prometheus_token_and_ca_paths_are_mounted_where_the_policy_is_read(base):
    import re

    from scoring.policy import parse_policy

    readme = (DEPLOY.parent / "README.md").read_text()
    (example,) = [block for block in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "kind: BalancerPolicy" in block]
    connection = parse_policy(example).prometheus
    wanted = {os.path.dirname(connection.bearer_token_file), os.path.dirname(connection.ca_file)}
    readers = {name: template for name, template in pod_templates(base)
               if name in ("gpu-balancer-webhook", "gpu-balancer-descheduler")}
    assert len(readers) == 2
    for name, template in readers.items():
        mounts = {m["mountPath"]: m["name"] for c in template["containers"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in template["volumes"]}
        assert wanted <= set(mounts), (name, mounts)
        token = volumes[mounts[os.path.dirname(connection.bearer_token_file)]]
        assert token["projected"]["sources"][0]["serviceAccountToken"]["path"] == os.path.basename(
            connection.bearer_token_file)
        assert volumes[mounts[os.path.dirname(connection.ca_file)]]["configMap"]["optional"] is True


def test_the_servicemonitor_component_ships_the_alert_and_recording_rules_as_prometheusrules(everything):
    (alerts,) = find(everything, "PrometheusRule", "gpu-balancer")
    assert alerts["spec"] == yaml.safe_load((DEPLOY / "monitoring" / "alerts.rules.yaml").read_text())
    (recording,) = find(everything, "PrometheusRule", "gpu-balancer-recording")
    assert recording["spec"] == yaml.safe_load((DEPLOY / "monitoring" / "recording.rules.yaml").read_text())


def test_the_nvml_exporter_is_scraped_without_its_own_pod_as_a_workload(everything):
    (monitor,) = find(everything, "PodMonitor", "gpu-balancer-nvml-exporter")
    (daemonset,) = find(everything, "DaemonSet", "gpu-balancer-nvml-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert {"action": "labeldrop", "regex": "pod|namespace|container"} in endpoint["relabelings"]
    (service,) = find(everything, "Service", "gpu-balancer-nvml-exporter")
    assert service["spec"]["ports"][0]["targetPort"] == endpoint["port"]


def test_the_runbooks_restore_step_reruns_the_certificate_job_that_patches_the_ca_bundle(base):
    import re
    import shlex

    runbook = (DEPLOY.parent / "docs" / "INSTALL.md").read_text().split("## Emergency runbook")[1]
    (create,) = [shlex.split(line.strip()) for line in runbook.splitlines() if "create job --from=cronjob/" in line]
    cronjob_name = next(arg for arg in create if arg.startswith("--from=cronjob/")).split("/", 1)[1]
    (cronjob,) = find(base, "CronJob", cronjob_name)
    (init_job,) = find(base, "Job", "gpu-balancer-certs-init")
    from_cron = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert from_cron == init_job["spec"]["template"]["spec"]["containers"][0]["args"], "the same certs ensure"
    job_name = create[-1]  # kubectl create job --from=cronjob/NAME JOB
    assert re.search(rf"wait --for=condition=complete job/{job_name}", runbook)
    assert '"suspend":false' in runbook, "the descheduler is resumed too"


def test_make_image_tags_the_build_with_the_package_version_and_the_overlay_override_applies(tmp_path):
    from importlib.metadata import version

    dry = subprocess.run(["make", "-n", "image", "IMAGE=registry.example.com/platform/gpu-balancer"],
                         cwd=DEPLOY.parent, capture_output=True, text=True, check=True).stdout
    assert f"docker build -t registry.example.com/platform/gpu-balancer:{version('gpu-balancer')} ." in dry
    guide = (DEPLOY.parent / "docs" / "INSTALL.md").read_text()
    override = guide.split("```yaml\nimages:")[1].split("```")[0]
    relative = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{relative}]\nimages:{override}")
    images = {c["image"] for _, template in pod_templates(kustomize(tmp_path)) for c in template["containers"]}
    assert images == {"registry.example.com/platform/gpu-balancer:0.1.0"}


EXAMPLES = ["kube-prometheus-stack", "thanos-query", "grafana-mimir"]


def _mounts(template: dict) -> list[str]:
    return [m["mountPath"] for c in template["containers"] for m in c.get("volumeMounts", [])]


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_overlays_render_validate_and_mount_every_file_their_policy_reads(example):
    from scoring.policy import parse_policy

    objects = kustomize(DEPLOY / "examples" / example)
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    (configmap,) = [o for o in find(objects, "ConfigMap") if o["metadata"]["name"].startswith("gpu-balancer-policy")]
    policy = parse_policy(configmap["data"]["policy.yaml"])
    assert policy.prometheus.url != parse_policy((DEPLOY / "base" / "policy.yaml").read_text()).prometheus.url
    assert policy.descheduler.dry_run, "examples keep the dry-run default"
    files = [f for f in (policy.prometheus.bearer_token_file, policy.prometheus.ca_file,
                         policy.prometheus.basic_auth.password_file) if f]
    templates = dict(pod_templates(objects))
    for name in ("gpu-balancer-webhook", "gpu-balancer-descheduler"):
        mounts = _mounts(templates[name])
        for path in files:
            assert any(path.startswith(m.rstrip("/") + "/") for m in mounts), (example, name, path, mounts)
        image = templates[name]["containers"][0]["image"]
        assert image.startswith("registry.example.com/platform/gpu-balancer:"), "the images override is shown"
    if example == "grafana-mimir":
        assert policy.prometheus.headers == {"X-Scope-OrgID": "gpu-fleet"} and policy.prometheus.basic_auth.username
    if example == "thanos-query":
        assert "cluster=" in policy.prometheus.series_selector
    if policy.prometheus.ca_file:
        volumes = {v["name"]: v for v in templates["gpu-balancer-webhook"]["volumes"]}
        assert volumes["prometheus-ca"]["configMap"]["name"] == "gpu-balancer-prometheus-ca"


def _match_condition(base):
    import celpy

    (config,) = find(base, "MutatingWebhookConfiguration")
    (condition,) = config["webhooks"][0]["matchConditions"]
    environment = celpy.Environment()
    program = environment.program(environment.compile(condition["expression"]))
    return lambda pod: bool(program.evaluate({"object": celpy.json_to_cel(pod)}))


def _pod(containers, init=None, claims=None):
    spec = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if claims is not None:
        spec["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_the_match_condition_sends_device_plugin_and_dra_pods_and_nothing_else(base):
    """The CEL expression evaluated (cel-python) on pods of every kind it must tell apart."""
    from tests.dra_objects import dra_pod

    matches = _match_condition(base)
    cpu = {"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}}
    gpu = {"name": "g", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    mig = {"name": "m", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
    shared = {"name": "s", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}
    assert matches(_pod([gpu])) and matches(_pod([cpu, mig])) and matches(_pod([shared]))
    assert matches(_pod([cpu], init=[gpu])), "a sidecar's GPU counts"
    assert matches(dra_pod("d", template_name="gpus")) and matches(dra_pod("n", claim_name="shared"))
    assert not matches(_pod([cpu])) and not matches(_pod([{"name": "bare"}]))
    assert not matches(_pod([cpu], init=[cpu], claims=[])), "an empty claims list claims nothing"
    assert not matches(_pod([{"name": "x", "resources": {"limits": {"example.com/fpga": "1"}}}]))


def test_promtool_fires_the_rules_behind_alert_only_for_our_groups_that_miss(tmp_path):
    require_tool("promtool", why="it comes with Debian's prometheus package")
    missed = "prometheus_rule_group_iterations_missed_total"
    ours = "/etc/prometheus/rules/gpu-balancer.yaml;gpu-balancer-snapshot"
    (alert,) = [rule for rule in yaml.safe_load((DEPLOY / "monitoring" / "alerts.rules.yaml").read_text())["groups"][0]
                ["rules"] if rule.get("alert") == "GpuBalancerRecordingRulesBehind"]
    description = alert["annotations"]["description"]
    tests = {
        "rule_files": [str(DEPLOY / "monitoring" / "alerts.rules.yaml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'{missed}{{rule_group="{ours}"}}', "values": "0x9 1+1x30"},
                {"series": f'{missed}{{rule_group="/etc/prometheus/rules/gpu-balancer.yaml;gpu-balancer-window"}}',
                 "values": "0x40"},
                {"series": f'{missed}{{rule_group="/etc/prometheus/rules/other.yaml;other-snapshot"}}',
                 "values": "0+1x40"},
            ],
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": "GpuBalancerRecordingRulesBehind", "exp_alerts": []},
                {"eval_time": "30m", "alertname": "GpuBalancerRecordingRulesBehind", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "rule_group": ours},
                    "exp_annotations": {
                        "summary": f"Prometheus skips evaluations of the gpu-balancer recording rules ({ours})",
                        "description": description},
                }]},
            ],
        }],
    }
    (tmp_path / "alerts.test.yaml").write_text(yaml.safe_dump(tests))
    result = subprocess.run(["promtool", "test", "rules", str(tmp_path / "alerts.test.yaml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
