"""`mcp-access status`: the status stanza of every object, checked against each kind's vendored CRD
(status schema, strict about unknown fields, and its CEL rules), for the demo's manifests and for a
set with objects that are not accepted. What only a cluster can confirm: that `kubectl apply
--server-side --subresource=status` takes them (the same schema check, done there by the API server)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator

from test_cli_e2e import cli  # noqa: F401  (the `cli` fixture)
from test_manifests import CRD_DIR, DEMO_MANIFESTS, REPO, Crds, cel_errors, gateway_api_demo, to_json_schema

PROJECT_CRDS = REPO / "config-schema" / "crds"

BROKEN = """\
apiVersion: mcp-access.io/v1alpha1
kind: AccessPolicy
metadata: {name: typo, namespace: demo, generation: 7}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: agents-gateway, sectionName: mtl}]
  action: Deny
"""


def statuses(cli: Path, *files: str) -> list[dict[str, Any]]:
    args = [a for f in files for a in ("-f", f)]
    proc = subprocess.run([str(cli), "status", *args, "--trust-domain", "example.org", "-o", "json"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "List"
    return doc["items"]


def status_errors(crds: Crds, obj: dict[str, Any]) -> list[str]:
    schema = crds.schema_for(obj)
    assert schema is not None, f"no CRD for {obj['apiVersion']} {obj['kind']}"
    status = schema["properties"]["status"]
    errors = [f"status.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
              for e in Draft4Validator(to_json_schema(status)).iter_errors(obj["status"])]
    return errors or cel_errors(status, obj["status"], "status")


@pytest.fixture(scope="module")
def crds() -> Crds:
    return Crds(CRD_DIR, PROJECT_CRDS)


def test_demo_statuses_are_valid_for_their_crds(cli: Path, crds: Crds) -> None:
    items = statuses(cli, str(DEMO_MANIFESTS))
    kinds = {o["kind"] for o in items}
    assert {"XAccessPolicy", "Gateway", "HTTPRoute", "XBackend"} <= kinds, kinds
    for o in items:
        assert set(o) == {"apiVersion", "kind", "metadata", "status"}, o
        assert status_errors(crds, o) == [], (o["kind"], o["metadata"], status_errors(crds, o))
    # Policy targets are marked as affected; listeners count their routes.
    gateways = [o for o in items if o["kind"] == "Gateway"]
    assert any(c["type"].endswith("PolicyAffected") for g in gateways for c in g["status"]["conditions"])
    listeners = [listener for g in gateways for listener in g["status"]["listeners"]]
    assert listeners and all(listener["attachedRoutes"] >= 1 for listener in listeners), listeners
    backends = [o for o in items if o["kind"] == "XBackend"]
    assert any(c["type"] == "XAccessPolicyAffected" for b in backends for c in b["status"]["conditions"])


def test_a_refused_policy_reports_false_with_its_generation(cli: Path, crds: Crds, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(BROKEN)
    items = statuses(cli, str(DEMO_MANIFESTS), str(broken))
    (typo,) = [o for o in items if o["metadata"]["name"] == "typo"]
    assert status_errors(crds, typo) == []
    (ancestor,) = typo["status"]["ancestors"]
    assert ancestor["ancestorRef"]["sectionName"] == "mtl"
    accepted = ancestor["conditions"][0]
    assert (accepted["type"], accepted["status"], accepted["reason"]) == ("Accepted", "False", "TargetNotFound")
    assert accepted["observedGeneration"] == 7
    assert "(valid: mcp-mtls, mcp-jwt)" in accepted["message"]


def test_route_policies_report_on_their_routes(cli: Path, crds: Crds, tmp_path: Path) -> None:  # noqa: F811
    """AccessPolicies on HTTPRoute rules (test_routes.py's manifests): one ancestor per target, the
    HTTPRoute with the rule's name as sectionName; the route's parents say a policy affects it."""
    from test_routes import MANIFESTS
    manifests = tmp_path / "routes.yaml"
    manifests.write_text(MANIFESTS)
    items = statuses(cli, str(manifests))
    for o in items:
        assert status_errors(crds, o) == [], (o["kind"], o["metadata"], status_errors(crds, o))
    (policy,) = [o for o in items if o["metadata"]["name"] == "admin-echo-only"]
    (ancestor,) = policy["status"]["ancestors"]
    assert ancestor["ancestorRef"] == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                       "namespace": "mcp", "name": "admin", "sectionName": "admin"}
    assert ancestor["conditions"][0]["status"] == "True"
    routes = {o["metadata"]["name"]: o for o in items if o["kind"] == "HTTPRoute"}
    affected = {name: any(c["type"] == "AccessPolicyAffected" for p in r["status"]["parents"] for c in p["conditions"])
                for name, r in routes.items()}
    assert affected == {"admin": True, "public": False}, affected



def test_gateway_api_xbackend_status_is_valid_for_its_crd(cli: Path, crds: Crds, tmp_path: Path) -> None:
    """A Gateway API XBackend's status is v1.6's BackendStatus (`parents`: the Gateway that routes
    to it, the controller, its conditions), valid for the vendored CRD's status schema; policies
    name it with its own group."""
    items = statuses(cli, str(gateway_api_demo(tmp_path)))
    for o in items:
        assert status_errors(crds, o) == [], (o["kind"], o["metadata"], status_errors(crds, o))
    (backend,) = [o for o in items if o["kind"] == "XBackend"]
    assert backend["apiVersion"] == "gateway.networking.x-k8s.io/v1alpha1"
    (parent,) = backend["status"]["parents"]
    assert parent["parentRef"] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                   "namespace": "demo", "name": "agents-gateway"}
    assert [c["type"] for c in parent["conditions"]][:2] == ["Accepted", "XAccessPolicyAffected"], parent
    refs = [a["ancestorRef"] for o in items if o["kind"] == "XAccessPolicy" for a in o["status"]["ancestors"]
            if a["ancestorRef"]["kind"] == "XBackend"]
    assert refs and all(r["group"] == "gateway.networking.x-k8s.io" for r in refs), refs
    # The validator is strict: the agentic kind's shape (`conditions` at the top) is refused here.
    wrong = {**backend, "status": {"conditions": parent["conditions"]}}
    assert status_errors(crds, wrong)
