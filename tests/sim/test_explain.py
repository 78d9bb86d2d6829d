"""`gpu-balancer explain` on hand-made clusters: the verdicts follow the scheduler rules."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import yaml

from scoring.ingest.series import aggregate_samples, build_snapshot
from scoring.ingest.telemetry import GpuSample
from scoring.policy import default_policy
from sim.explain import as_table, explain, nodes_from_list

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def cluster():
    def node(name, taints=()):
        return {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {"taints": list(taints)},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}}

    busy = {"kind": "Pod", "metadata": {"name": "big", "namespace": "ml"}, "status": {"phase": "Running"},
            "spec": {"nodeName": "gpu-a", "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "8"}, "limits": {"nvidia.com/gpu": "7"}}}]}}
    return {"kind": "List", "items": [node("gpu-a"), node("gpu-b"), node("gpu-c"),
                                      node("gpu-t", [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]), busy]}


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "ml", "labels": {"app": "llm"},
                                                       "ownerReferences": [{"kind": "ReplicaSet", "name": "llm-1",
                                                                            "controller": True, "uid": "u"}]},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": "2"}}}]}}


def test_explain_names_the_failed_filter_and_the_chosen_nodes():
    result = explain(POD, nodes_from_list(cluster()), snapshot=None, policy=default_policy(), now=NOW)
    by_name = {n["name"]: n for n in result["nodes"]}
    assert by_name["gpu-a"]["failed_filter"] == "NodeResourcesFit"
    assert by_name["gpu-t"]["failed_filter"] == "TaintToleration"
    assert by_name["gpu-b"]["feasible"] and set(by_name["gpu-b"]["scores"]) >= {"NodeResourcesFit", "NodeAffinity"}
    assert set(result["chosen"]) == {"gpu-b", "gpu-c"}, "equal scores: a tie the scheduler breaks at random"
    assert "advised" not in result


def test_explain_shows_each_nodes_time_to_ready_from_the_images_its_kubelet_lists():
    listed = cluster()
    gpu_b = next(n for n in listed["items"] if n["metadata"]["name"] == "gpu-b")
    gpu_b["status"]["images"] = [{"names": ["docker.io/vllm/vllm-openai:v0.8.5"], "sizeBytes": 12_000_000_000}]
    pod = json.loads(json.dumps(POD))
    pod["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.8.5"  # Docker Hub, written short
    result = explain(pod, nodes_from_list(listed), snapshot=None, policy=default_policy(), now=NOW)
    ready = {n["name"]: n["ready"] for n in result["nodes"]}
    assert ready["gpu-b"] == "~30 s (image cached)"
    assert ready["gpu-c"] == "~90 s (pull 12.0 GB)", "12 GB at the default 200 MB/s, then the start"
    assert "; ready ~30 s (image cached)" in as_table(result)


def test_with_telemetry_the_advice_breaks_the_tie_towards_the_cool_node():
    samples = [GpuSample(node=n, gpu=str(g), util_percent=u, fb_used_mib=1000, fb_free_mib=79000, temperature_c=50)
               for n, u in (("gpu-a", 90.0), ("gpu-b", 85.0), ("gpu-c", 5.0)) for g in range(8)]
    snapshot = build_snapshot(aggregate_samples(samples), taken_at=NOW, newest_sample_at=NOW)
    result = explain(POD, nodes_from_list(cluster()), snapshot=snapshot, policy=default_policy(), now=NOW)
    assert set(result["chosen"]) == {"gpu-b", "gpu-c"}
    assert result["advised"]["chosen"] == ["gpu-c"]
    assert "gpu-b(hot)" in result["advice"]


def test_the_explain_command_reads_files_and_prints_json(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps(cluster()))
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(POD))
    result = subprocess.run([sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file",
                             str(tmp_path / "cluster.json"), "--pod", str(tmp_path / "pod.yaml"), "--output", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"nodes", "chosen"} <= set(report)
    assert {"name", "feasible", "failed_filter", "scores", "total", "ready"} == set(report["nodes"][0])
    bad = subprocess.run([sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file", str(tmp_path / "pod.yaml"),
                          "--pod", str(tmp_path / "pod.yaml")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2


def test_explain_without_prometheus_takes_a_production_policy_whose_token_is_not_mounted_here(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps(cluster()))
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(POD))
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: gpu-balancer.io/v1alpha1\nkind: BalancerPolicy\nprometheus:\n"
                      f"  bearerTokenFile: {tmp_path / 'not-mounted' / 'token'}\n")
    args = [sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file", str(tmp_path / "cluster.json"),
            "--pod", str(tmp_path / "pod.yaml"), "--config", str(policy)]
    offline = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert offline.returncode == 0, offline.stderr
    online = subprocess.run([*args, "--prometheus-url", "http://127.0.0.1:9"], capture_output=True, text=True,
                            timeout=60)
    assert online.returncode == 2 and "prometheus.bearerTokenFile" in online.stderr
