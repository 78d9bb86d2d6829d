"""The BalancerPolicy document: defaults, decoding and one clear error per bad field."""

import dataclasses

import pytest

from scoring.policy import DEFAULT_CRITICAL_XIDS, BalancerPolicy, PolicyError, default_policy, parse_policy, validate_policy

FULL = """
apiVersion: gpu-balancer.io/v1alpha1
kind: BalancerPolicy
metadata: {name: prod}
prometheus:
  url: https://thanos-query.monitoring:9090
  timeoutSeconds: 3
  bearerTokenFile: /var/run/secrets/token
  caFile: /etc/ca.crt
  headers: {X-Scope-OrgID: team-gpu}
  seriesSelector: '{cluster="prod", region=~"eu-.*"}'
telemetry:
  nodeLabel: kubernetes_node
  refreshSeconds: 10
  stalenessLimitSeconds: 90
heat:
  hotUtilPercent: 85
  criticalXids: [79]
"""


def test_an_empty_document_gives_the_defaults():
    assert parse_policy("") == default_policy() == BalancerPolicy()


def test_the_defaults_are_valid():
    validate_policy(default_policy())


def test_every_field_of_a_full_document_is_read():
    policy = parse_policy(FULL)
    assert policy.prometheus.url == "https://thanos-query.monitoring:9090"
    assert policy.prometheus.timeout_seconds == 3.0
    assert policy.prometheus.headers == {"X-Scope-OrgID": "team-gpu"}
    assert policy.prometheus.selector_matchers == 'cluster="prod", region=~"eu-.*"'
    assert policy.telemetry.node_label == "kubernetes_node"
    assert policy.telemetry.refresh_seconds == 10.0
    assert policy.heat.hot_util_percent == 85.0
    assert policy.heat.warm_util_percent == 50.0, "unset fields keep their defaults"
    assert policy.heat.critical_xids == (79,)


def test_the_default_critical_xids_cover_the_known_fatal_ones():
    assert {48, 63, 64, 74, 79, 92, 94, 95} <= set(DEFAULT_CRITICAL_XIDS)


def test_the_policy_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        default_policy().heat.hot_util_percent = 1  # type: ignore[misc]


@pytest.mark.parametrize(("document", "names"), [
    ("apiVersion: v2\n", "apiVersion"),
    ("kind: Policy\n", "kind"),
    ("- a\n- b\n", "mapping"),
    ("heat: {hotUtilPercent: hot}\n", "heat.hotUtilPercent"),
    ("heat: {hotUtilPercent: true}\n", "heat.hotUtilPercent"),
    ("heat: {warmUtilPercent: 90, hotUtilPercent: 80}\n", "heat.warmUtilPercent"),
    ("heat: {hotMemoryFraction: 1.5}\n", "heat.hotMemoryFraction: must be between 0 and 1, got 1.5"),
    ("heat: {hotUtilPercent: -5}\n", "heat.hotUtilPercent: must be between 0 and 100, got -5"),
    ("heat: {warmMemoryFraction: 0.95}\n", "heat.warmMemoryFraction: must be below hotMemoryFraction"),
    ("telemetry: {recordingIntervalSeconds: 20, stalenessLimitSeconds: 12}\n", "telemetry.recordingIntervalSeconds"),
    ("heat: {criticalXids: 79}\n", "heat.criticalXids"),
    ("heat: {criticalXids: [79, x]}\n", "heat.criticalXids[1]"),
    ("heat: {hotUtilPercnt: 80}\n", "heat.hotUtilPercnt"),
    ("telemetry: {refreshSeconds: 0}\n", "telemetry.refreshSeconds"),
    ("telemetry: {refreshSeconds: 60, stalenessLimitSeconds: 30}\n", "telemetry.stalenessLimitSeconds"),
    ("telemetry: {vanishLookbackSeconds: 300, vanishCheckSeconds: 600}\n", "telemetry.vanishCheckSeconds"),
    ("telemetry: {nodeLabel: 'no spaces'}\n", "telemetry.nodeLabel"),
    ("telemetry: {recordingIntervalSeconds: 0}\n", "telemetry.recordingIntervalSeconds"),
    ("telemetry: {recordingIntervalSeconds: 7.5}\n", "telemetry.recordingIntervalSeconds"),
    ("telemetry: {recordingIntervalSeconds: 120, stalenessLimitSeconds: 120}\n", "telemetry.recordingIntervalSeconds"),
    ("telemetry: [1]\n", "telemetry"),
    ("prometheus: {url: prometheus:9090}\n", "prometheus.url"),
    ("prometheus: {seriesSelector: 'cluster=prod'}\n", "prometheus.seriesSelector"),
    ("prometheus: {headers: {X-Scope-OrgID: 3}}\n", "prometheus.headers"),
    ("prometheus: {basicAuth: {username: admin}}\n", "prometheus.basicAuth"),
    ("heat: {hotUtilPercent: [\n", "YAML"),
])
def test_a_bad_document_gives_one_error_naming_the_field(document, names):
    with pytest.raises(PolicyError, match=None) as error:
        parse_policy(document)
    assert names in str(error.value)


@pytest.mark.parametrize(("staleness", "interval"), [(120, 30), (12, 3), (6, 1), (600, 30), (100, 25)])
def test_an_unset_recording_interval_is_derived_from_the_staleness_limit(staleness, interval):
    # A policy that only shortens the staleness limit is valid: the interval it never set follows it.
    policy = parse_policy(f"telemetry: {{stalenessLimitSeconds: {staleness}}}\n")
    assert policy.telemetry.recording_interval_seconds is None
    assert policy.telemetry.recording_interval == interval < staleness
    assert "derived" in policy.telemetry.recording_interval_origin


def test_a_recording_interval_that_is_set_is_kept_and_said_to_be_set():
    telemetry = parse_policy("telemetry: {recordingIntervalSeconds: 10, stalenessLimitSeconds: 12}\n").telemetry
    assert telemetry.recording_interval == 10
    assert telemetry.recording_interval_origin == "telemetry.recordingIntervalSeconds"
