"""Property tests: whatever arrives, decoding fails cleanly or the pod is allowed, never a crash."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scoring.advice.placement import index_fleet
from scoring.policy import PlacementPolicy
from webhook.admit import decide
from webhook.ledger import SteeringLedger
from webhook.review import ReviewError, decode_review
from tests.webhook.helpers import NOW, apply_response, fleet, gpu_pod, node, review

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30)

quantities = st.one_of(st.integers(-10, 10_000), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=12), st.sampled_from(["1", "2", "500m", "1Ki", "1e3", "-1", "8"]))
resources = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "cpu", "memory"])


@st.composite
def pods(draw):
    pod = gpu_pod(draw(quantities), resource=draw(resources))
    if draw(st.booleans()):
        pod["spec"]["containers"].append({"name": "x", "resources": draw(json_values)})
    if draw(st.booleans()):
        pod["spec"]["affinity"] = draw(st.dictionaries(st.sampled_from(["nodeAffinity", "podAffinity"]),
                                                       json_values, max_size=2))
    if draw(st.booleans()):
        pod["metadata"]["labels"] = draw(st.dictionaries(st.text(max_size=30), json_values, max_size=4))
    if draw(st.booleans()):
        pod["spec"]["topologySpreadConstraints"] = draw(json_values)
    return pod


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pods())
def test_any_pod_is_allowed_and_its_patch_applies(pod):
    request = decode_review(json.dumps(review(pod)).encode())
    decision = decide(request, index=index_fleet(fleet(node("a"), node("b", util=60))), telemetry_time=NOW, snapshot_age_seconds=1,
                      ledger=SteeringLedger(60), policy=PlacementPolicy(hard_avoid_hot=True), now=NOW)
    assert decision.review["response"]["allowed"] is True
    assert decision.review["response"]["uid"] == request.uid
    apply_response(pod, decision.review)  # raises if the patch does not apply


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_either_decodes_or_is_a_review_error(value):
    try:
        decode_review(json.dumps(value).encode())
    except ReviewError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_either_decode_or_are_a_review_error(body):
    try:
        decode_review(body)
    except ReviewError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["uid", "kind", "operation", "namespace", "object", "dryRun"]), json_values))
def test_broken_requests_are_review_errors_or_answered(request_fields):
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request_fields})
    try:
        request = decode_review(body.encode())
    except ReviewError:
        return
    decision = decide(request, index=None, telemetry_time=None, snapshot_age_seconds=None, ledger=SteeringLedger(1),
                      policy=PlacementPolicy(), now=NOW)
    assert decision.review["response"]["allowed"] is True


def test_deeply_nested_and_oversized_bodies_are_review_errors():
    deep = b"[" * 100_000 + b"]" * 100_000
    for body in (deep, b" " * (4 * 1024 * 1024)):
        try:
            decode_review(body)
        except ReviewError as error:
            assert str(error)
        else:
            raise AssertionError("accepted")


def test_bodies_only_the_standard_library_reads_are_still_answered():
    # NaN and out-of-range numbers are not JSON an API server sends, but the webhook read them
    # before it decoded with orjson, and must keep answering them rather than turn them away.
    for junk in ("NaN", "Infinity", "1e400", str(2**70)):
        body = json.dumps(review(gpu_pod(1)))[:-1] + f', "extra": {junk}}}'
        request = decode_review(body.encode())
        decision = decide(request, index=index_fleet(fleet(node("a"))), telemetry_time=NOW, snapshot_age_seconds=1,
                          ledger=SteeringLedger(60), policy=PlacementPolicy(), now=NOW)
        assert decision.review["response"]["allowed"] is True and decision.outcome == "mutated"


claim_refs = st.lists(st.one_of(json_values, st.fixed_dictionaries({"name": st.text(max_size=5)}, optional={
    "resourceClaimTemplateName": st.sampled_from(["t", "u", 7]), "resourceClaimName": st.sampled_from(["c", None])})),
    max_size=3)
device_requests = st.lists(st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "name": json_values, "exactly": st.fixed_dictionaries({}, optional={
        "deviceClassName": st.sampled_from(["gpu.nvidia.com", "mig.nvidia.com", "x", 3]),
        "allocationMode": st.sampled_from(["All", "ExactCount", "?", None]), "count": json_values,
        "adminAccess": json_values}),
    "firstAvailable": st.lists(json_values | st.fixed_dictionaries({"deviceClassName": st.just("gpu.nvidia.com"),
                                                                     "count": json_values}), max_size=3)})),
    max_size=3)


claim_status = st.one_of(json_values, st.fixed_dictionaries({"allocation": st.fixed_dictionaries({}, optional={
    "nodeSelector": json_values | st.just({"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}),
    "devices": json_values})}))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(claim_refs, device_requests, claim_status, st.booleans())
def test_any_dra_pod_and_any_claim_are_allowed_and_never_crash(refs, requests, status, with_view):
    """DRA input is untrusted too: the pod's claim references, the templates' and claims' specs
    and allocations, whatever their shape."""
    from scoring.cluster.claims import book_from_objects, class_resource
    from scoring.cluster.feasibility import NodeFacts
    from scoring.cluster.view import ClusterView

    policy = PlacementPolicy()
    objects = [{"kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "ml"},
                "spec": {"spec": {"devices": {"requests": requests}}}},
               {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ml"},
                "spec": {"devices": {"requests": requests}}, "status": status}]
    pod = gpu_pod(resource="cpu")
    pod["spec"]["resourceClaims"] = refs
    request = decode_review(json.dumps(review(pod)).encode())
    index, ledger, book = index_fleet(fleet(node("a"), node("b", util=60))), SteeringLedger(60), book_from_objects(
        objects, policy)
    if with_view:
        devices = {class_resource("gpu.nvidia.com"): 8, class_resource("mig.nvidia.com"): 7}
        ledger.prepare(index, ClusterView({n: NodeFacts(n, {}, (), False, devices) for n in ("a", "b")}, claims=book))
    decision = decide(request, index=index, telemetry_time=NOW, snapshot_age_seconds=1, ledger=ledger, policy=policy,
                      now=NOW, claims=book)
    assert decision.review["response"]["allowed"] is True
    apply_response(pod, decision.review)
