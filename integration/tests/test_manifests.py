"""The Kubernetes objects `mcp-access manifests` renders for Envoy Gateway and Istio from the
demo's manifests (envoy-demo/manifests: Gateway, HTTPRoute, XBackend, XAccessPolicy).

1. Every generated object is validated against the upstream CRD schemas vendored in
   config-schema/crds/upstream/ (as the API server would: defaults, the OpenAPI schema with unknown
   fields rejected, and every x-kubernetes-validations CEL rule). A generated kind without its CRD
   there fails the test. The validator is shown to reject broken objects, so a pass means something.
2. The example manifests in envoy-demo/deploy/ are what the CLI renders from their recorded inputs.
3. Each platform's output is rendered into the Envoy configuration that platform would produce
   (Envoy Gateway: the Wasm filter it generates, with the EnvoyPatchPolicy's JSON patches applied
   and its clusters added, the ClientTrafficPolicy's buffer limit; Istio: the WasmPlugin's
   pluginConfig as the filter's configuration, no allow_on_headers_stop_iteration, Istio's cluster
   names) and real Envoy runs the demo session through it: one allowed call, and denials at the
   gateway, by the backend policy and by the authorizer, none of which reaches the MCP server.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import cel
import pytest
import yaml
from jsonschema import Draft4Validator

from harness import (
    ALPHA,
    BETA,
    Cluster,
    Denied,
    EnvoyProcess,
    Listener,
    McpAgent,
    Pki,
    Route,
    Tls,
    Wasm,
    build_bootstrap,
    free_port,
    normalization,
    start_authorizer,
    start_mcp_server,
    text_of,
)
from test_cli_e2e import cli  # noqa: F401  (a fixture: the mcp-access binary)

StartEnvoy = Callable[..., EnvoyProcess]
REPO = Path(__file__).resolve().parents[2]
DEMO_MANIFESTS = "envoy-demo/manifests"
EXAMPLE_IMAGE = "registry.example.com/mcp-access/filter:0.1.0"
# The inputs envoy-demo/deploy/*.yaml were generated from (see docs/deploy.md); the digest is an example.
EXAMPLE_DIGEST = "sha256:104004ba71a47a3c6d9c736d22d4fd39fb0047237b7c2b3aa49ccbe8a1e0f6e7"
# The demo's bearer-token listener admits agents by JWT: its issuer is declared as in envoy-demo/demo.py.
COMPILE_ARGS = ["-f", DEMO_MANIFESTS, "--trust-domain", "example.org",
                "--jwt-provider", "demo-idp=issuer=https://auth.demo.mcp-access.local,"
                                  "jwks=https://auth.demo.mcp-access.local/jwks.json"]
EXAMPLE_ARGS = [*COMPILE_ARGS, "--image", EXAMPLE_IMAGE, "--digest", EXAMPLE_DIGEST]
PLATFORMS = ("envoy-gateway", "istio")


CRD_DIR = REPO / "config-schema" / "crds" / "upstream"
# The project's own CRD (generated from its Rust types) and the examples of its kind.
PROJECT_CRD = REPO / "config-schema" / "crds" / "mcp-access.io_accesspolicies.yaml"
PROJECT_EXAMPLES = REPO / "config-schema" / "crds" / "examples"
# The vendored CRD files the generated kinds are validated against.
CRD_FILES = {
    "EnvoyExtensionPolicy": "envoy-gateway/gateway.envoyproxy.io_envoyextensionpolicies.yaml",
    "EnvoyPatchPolicy": "envoy-gateway/gateway.envoyproxy.io_envoypatchpolicies.yaml",
    "ClientTrafficPolicy": "envoy-gateway/gateway.envoyproxy.io_clienttrafficpolicies.yaml",
    # For a Gateway API XBackend (ExternalHostname): Envoy Gateway's Backend, the HTTPRoutes
    # turned to it and a ReferenceGrant for routes of another namespace.
    "Backend": "envoy-gateway/gateway.envoyproxy.io_backends.yaml",
    "HTTPRoute": "gateway-api/gateway.networking.k8s.io_httproutes.yaml",
    "ReferenceGrant": "gateway-api/gateway.networking.k8s.io_referencegrants.yaml",
    # Not generated: the input kind those are made from, validated as test input.
    "XBackend": "gateway-api/gateway.networking.x-k8s.io_xbackends.yaml",
    "WasmPlugin": "istio/wasmplugin.yaml",
    "EnvoyFilter": "istio/envoyfilter.yaml",
}


def run_manifests(cli: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), "manifests", *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def generate(cli: Path, tmp: Path, *args: str, platforms: tuple[str, ...] = PLATFORMS) -> dict[str, list[dict[str, Any]]]:
    """`mcp-access manifests ARGS --platform P -o TMP/P.yaml` for each platform, parsed."""
    out = {}
    for p in platforms:
        proc = run_manifests(cli, *args, "--platform", p, "-o", str(tmp / f"{p}.yaml"))
        assert proc.returncode == 0, proc.stderr
        out[p] = [d for d in yaml.safe_load_all((tmp / f"{p}.yaml").read_text()) if d]
    return out


def compiled_bundle(cli: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run([str(cli), "compile", *COMPILE_ARGS, *args, "-o", "-"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---------------------------------------------------------------------------
# A CRD validator: defaults, OpenAPI schema (strict about unknown fields), CEL rules


class Crds:
    def __init__(self, *places: Path) -> None:
        """The CRDs in these files and directories (recursively)."""
        self.schemas: dict[tuple[str, str], dict[str, Any]] = {}  # (apiVersion, kind) -> schema
        files = [f for p in places for f in (sorted(p.rglob("*.yaml")) if p.is_dir() else [p])]
        for path in files:
            for doc in yaml.safe_load_all(path.read_text()):
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec["versions"]:
                    if version.get("served"):
                        key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                        self.schemas[key] = version["schema"]["openAPIV3Schema"]

    def schema_for(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        return self.schemas.get((obj.get("apiVersion", ""), obj.get("kind", "")))


def to_json_schema(s: dict[str, Any], structural: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    types: list[str] = []
    if s.get("x-kubernetes-int-or-string"):
        types = ["integer", "string"]
    elif "type" in s:
        types = [s["type"]]
    if types and s.get("nullable"):
        types.append("null")
    if types:
        out["type"] = types if len(types) > 1 else types[0]
    for key in ("enum", "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems", "required",
                "minProperties", "maxProperties"):
        if key in s:
            out[key] = s[key]
    if "enum" in out and s.get("nullable"):
        out["enum"] = [*out["enum"], None]
    if "properties" in s:
        out["properties"] = {k: to_json_schema(v, structural) for k, v in s["properties"].items()}
        if structural and not s.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in s:
            out["additionalProperties"] = False  # kubectl's strict field validation
    if isinstance(s.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(s["additionalProperties"], structural)
    if "items" in s:
        out["items"] = to_json_schema(s["items"], structural)
    for key in ("oneOf", "anyOf", "allOf"):
        if key in s:
            out[key] = [to_json_schema(x, structural=False) for x in s[key]]
    if "not" in s:
        out["not"] = to_json_schema(s["not"], structural=False)
    return out


def apply_defaults(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, sub_value in value.items():
            if key in props:
                apply_defaults(props[key], sub_value)
            elif isinstance(schema.get("additionalProperties"), dict):
                apply_defaults(schema["additionalProperties"], sub_value)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            apply_defaults(schema["items"], item)


def _url_parts(s: str) -> Any:
    return urlsplit(s)


def cel_context(value: Any) -> cel.Context:
    ctx = cel.Context()
    # Kubernetes' URL library, as far as the CRDs here use it.
    ctx.add_function("isURL", lambda s: bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s]*$", s))
                     or bool(re.match(r"^/[^\s]*$", s)))
    ctx.add_function("url", lambda s: s)
    ctx.add_function("getScheme", lambda s: _url_parts(s).scheme)
    ctx.add_function("getHost", lambda s: _url_parts(s).netloc)
    ctx.add_variable("self", value)
    return ctx


def cel_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors = []
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue  # transition rules only apply to updates
        try:
            ok = cel.evaluate(rule["rule"], cel_context(value))
        except Exception as e:  # noqa: BLE001 - an evaluation error fails validation, as in the API server
            errors.append(f"{path}: rule {rule['rule']!r} could not be evaluated: {e}")
            continue
        if ok is not True:
            errors.append(f"{path}: {rule.get('message') or rule['rule']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, sub_value in value.items():
            if key in props:
                errors += cel_errors(props[key], sub_value, f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += cel_errors(schema["additionalProperties"], sub_value, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += cel_errors(schema["items"], item, f"{path}[{i}]")
    return errors


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate(crds: Crds, obj: dict[str, Any]) -> list[str]:
    schema = crds.schema_for(obj)
    assert schema is not None, f"no CRD for {obj.get('apiVersion')} {obj.get('kind')}"
    obj = copy.deepcopy(obj)
    errors = []
    md = obj.get("metadata", {})
    if not (isinstance(md.get("name"), str) and len(md["name"]) <= 253 and DNS_SUBDOMAIN.match(md["name"])):
        errors.append(f"metadata.name {md.get('name')!r} is not a DNS subdomain")
    if "namespace" in md and not DNS_LABEL.match(md["namespace"]):
        errors.append(f"metadata.namespace {md['namespace']!r} is not a DNS label")
    apply_defaults(schema, obj)
    root = to_json_schema(schema)
    # The API server always accepts the object's type and metadata at the root.
    root.setdefault("properties", {}).update(
        {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}})
    for e in Draft4Validator(root).iter_errors(obj):
        errors.append(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}")
    if not errors:
        errors += cel_errors(schema, obj, "<root>")
    return errors


@pytest.fixture(scope="module")
def crds() -> Crds:
    missing = [f for f in CRD_FILES.values() if not (CRD_DIR / f).is_file()]
    assert not missing, f"vendored CRDs missing under {CRD_DIR}: {missing}"
    assert PROJECT_CRD.is_file(), PROJECT_CRD
    return Crds(CRD_DIR, PROJECT_CRD)


@pytest.fixture(scope="module")
def generated(cli: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return generate(cli, tmp_path_factory.mktemp("manifests"), *EXAMPLE_ARGS)


EXPECTED_KINDS = [("envoy-gateway", "EnvoyExtensionPolicy"), ("envoy-gateway", "EnvoyPatchPolicy"),
                  ("envoy-gateway", "ClientTrafficPolicy"), ("istio", "WasmPlugin"), ("istio", "EnvoyFilter")]


@pytest.mark.parametrize(("platform", "kind"), EXPECTED_KINDS)
def test_generated_object_is_valid_for_its_crd(
    platform: str, kind: str, generated: dict[str, list[dict[str, Any]]], crds: Crds
) -> None:
    objs = [o for o in generated[platform] if o["kind"] == kind]
    assert objs, f"{platform} output has no {kind}"
    for obj in objs:
        assert crds.schema_for(obj) is not None, (
            f"{CRD_DIR / CRD_FILES[kind]} does not serve {obj['apiVersion']} {kind}")
        assert validate(crds, obj) == [], yaml.safe_dump(obj)


def test_the_validator_rejects_broken_objects(generated: dict[str, list[dict[str, Any]]], crds: Crds) -> None:
    eep, epp, ctp = generated["envoy-gateway"]
    plugin = generated["istio"][0]

    def broken(obj: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> list[str]:
        obj = copy.deepcopy(obj)
        change(obj)
        return validate(crds, obj)

    # Unknown field (strict field validation), enum, wrong type.
    assert broken(eep, lambda o: o["spec"]["wasm"][0].update(failClosed=True))
    assert broken(plugin, lambda o: o["spec"].update(phase="AUTHORIZATION"))
    assert broken(eep, lambda o: o["spec"]["wasm"][0].update(failOpen="no"))
    # CEL rules: both targetRef and targetRefs; image code without image; a URL scheme Istio refuses.
    errors = broken(eep, lambda o: o["spec"].update(targetRef=o["spec"]["targetRefs"][0]))
    assert any("either targetRef or targetRefs" in e for e in errors), errors
    errors = broken(eep, lambda o: o["spec"]["wasm"][0]["code"].pop("image"))
    assert any("image field needs to be set" in e for e in errors), errors
    errors = broken(plugin, lambda o: o["spec"].update(url="ftp://registry.example.com/x"))
    assert any("url must have schema" in e for e in errors), errors
    assert broken(plugin, lambda o: o["spec"].update(sha256="ABC")), "sha256 pattern"
    assert broken(plugin, lambda o: o["metadata"].update(name="Not_A_Name"))
    # The EnvoyPatchPolicy's and ClientTrafficPolicy's schemas and rules are applied too.
    assert broken(epp, lambda o: o["spec"].update(type="JSONMerge"))
    assert broken(epp, lambda o: o["spec"]["jsonPatches"][1]["operation"].update(op="append"))
    assert broken(ctp, lambda o: o["spec"]["connection"].update(bufferLimit="2MB"))
    errors = broken(ctp, lambda o: o["spec"]["targetRefs"][0].update(kind="HTTPRoute"))
    assert any("targetRefs[*].kind of Gateway or" in e for e in errors), errors


# What each invalid AccessPolicy example is refused for (a part of the message).
INVALID_ACCESS_POLICIES = {
    "block-beside-rules.yaml": "with a defaults or overrides block, action, externalAuth, rules and when belong in the block",
    "block-on-backend.yaml": "defaults and overrides may only be set on a policy that targets Gateways",
    "block-without-action.yaml": "'action' is a required property",
    "defaults-and-overrides.yaml": "only one of defaults and overrides may be set",
    "unset-on-gateway.yaml": "unset may only be set on a policy that targets XBackends",
    "deny-with-external-auth.yaml": "externalAuth may only be specified when action is set to 'ExternalAuth'",
    "identity-header-authorization.yaml": "the name is a header with another meaning",
    "identity-headers-on-gateway.yaml": "identityHeaders may only be set on a policy that targets XBackends",
    "jwt-claim-without-values.yaml": "values: [] should be non-empty",
    "jwt-without-jwt.yaml": "jwt must be specified when type is set to 'JWT'",
    "jwt-without-type.yaml": "type must be 'JWT' when jwt is set",
    "mixed-targets.yaml": "All targetRefs must have the same Kind",
    "scope-value-with-space.yaml": "a scope claim (scope, scp) is matched per scope",
    "scope-value-with-whitespace.yaml": "a scope claim (scope, scp) is matched per scope",
    "unknown-action.yaml": "'Audit' is not one of",
    "unknown-field.yaml": "'priority' was unexpected",
    "when-without-predicate.yaml": "'predicate' is a required property",
}


def test_access_policy_crd_validates_its_examples(crds: Crds) -> None:
    """The generated AccessPolicy CRD, applied as the API server would: every valid example passes,
    every invalid one is refused for its reason, and an upstream XAccessPolicy v1alpha1 spec is an
    AccessPolicy spec as it is."""
    crd = next(d for d in yaml.safe_load_all(PROJECT_CRD.read_text()) if d)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    valid = sorted((PROJECT_EXAMPLES / "valid").glob("*.yaml"))
    assert [p.name for p in valid] == [
        "cel.yaml",
        "defaults.yaml",
        "deny.yaml",
        "identity-headers.yaml",
        "jwt.yaml",
        "overrides.yaml",
        "route.yaml",
        "unset.yaml",
        "when.yaml",
    ]
    for path in valid:
        for obj in (d for d in yaml.safe_load_all(path.read_text()) if d):
            assert crds.schema_for(obj) is not None, path
            assert validate(crds, obj) == [], (path, validate(crds, obj))
    invalid = sorted((PROJECT_EXAMPLES / "invalid").glob("*.yaml"))
    assert sorted(p.name for p in invalid) == sorted(INVALID_ACCESS_POLICIES)
    for path in invalid:
        obj = yaml.safe_load(path.read_text())
        errors = validate(crds, obj)
        assert any(INVALID_ACCESS_POLICIES[path.name] in e for e in errors), (path.name, errors)
    upstream = REPO / "config-schema/crds/upstream/kube-agentic-networking/examples/valid"
    for name in ("accesspolicy_v1alpha1.yaml", "cel-policy.yaml"):
        obj = yaml.safe_load((upstream / name).read_text())
        if obj["apiVersion"].endswith("/v1alpha1"):
            obj.update(apiVersion="mcp-access.io/v1alpha1", kind="AccessPolicy")
            assert validate(crds, obj) == [], name
    # The project's fields in the upstream kind: its CRD refuses them.
    obj = yaml.safe_load((PROJECT_EXAMPLES / "valid" / "deny.yaml").read_text())
    obj.update(apiVersion="agentic.networking.x-k8s.io/v1alpha1", kind="XAccessPolicy")
    assert crds.schema_for(obj) is not None
    assert any("'Deny' is not one of" in e for e in validate(crds, obj))


OAUTH_SETTINGS = """\
apiVersion: mcp-access.io/v1alpha1
kind: FilterSettings
metadata: {name: settings}
spec:
  protectedResources:
  - targetRef: {namespace: demo, name: agents-gateway, sectionName: mcp-jwt}
    resource: https://mcp.demo.example/mcp
    authorizationServers: [https://auth.demo.example]
    scopesSupported: [mcp]
"""


def test_envoy_gateway_serves_oauth_metadata_with_valid_objects(cli: Path, tmp_path: Path, crds: Crds) -> None:
    """With protected resource metadata on a listener, the Envoy Gateway rendering adds an
    HTTPRouteFilter (a direct response with the RFC 9728 document) and an HTTPRoute of that
    listener matching the metadata paths: both valid for the vendored CRDs (Envoy Gateway's
    HTTPRouteFilter, Gateway API's HTTPRoute, CEL rules included)."""
    (tmp_path / "settings.yaml").write_text(OAUTH_SETTINGS)
    out = generate(cli, tmp_path, *EXAMPLE_ARGS, "-f", str(tmp_path / "settings.yaml"), platforms=("envoy-gateway",))
    objs = out["envoy-gateway"]
    (flt,) = [o for o in objs if o["kind"] == "HTTPRouteFilter"]
    (route,) = [o for o in objs if o["kind"] == "HTTPRoute"]
    for obj in (flt, route):
        assert crds.schema_for(obj) is not None, obj["kind"]
        assert validate(crds, obj) == [], yaml.safe_dump(obj)
    doc = json.loads(flt["spec"]["directResponse"]["body"]["inline"])
    assert doc == {"resource": "https://mcp.demo.example/mcp", "authorization_servers": ["https://auth.demo.example"],
                   "bearer_methods_supported": ["header"], "scopes_supported": ["mcp"]}
    assert [m["path"]["value"] for m in route["spec"]["rules"][0]["matches"]] == [
        "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
    assert route["spec"]["parentRefs"][0]["sectionName"] == "mcp-jwt"


GATEWAY_API_XBACKEND = """\
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: tools, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: tools.demo.example}
  port: {port: 8080}
  protocol: MCP
"""
AGENTIC_XBACKEND = ("apiVersion: agentic.networking.x-k8s.io/v0alpha0\nkind: XBackend\nmetadata:\n  name: tools\n"
                    "  namespace: demo\nspec:\n  mcp:\n    serviceName: tools\n    port: 8080\n    path: /mcp\n")


def gateway_api_demo(tmp: Path, tls: str = "", name: str = "gateway-api-demo") -> Path:
    """The demo's manifests with its XBackend as Gateway API's kind (v1.6; `tls`: the lines of
    its `spec.tls`) and every reference to it written with that group."""
    d = tmp / name
    d.mkdir()
    xbackend = GATEWAY_API_XBACKEND + (f"  tls:\n{tls}" if tls else "")
    for f in (REPO / DEMO_MANIFESTS).glob("*.yaml"):
        text = f.read_text()
        if f.name == "gateway.yaml":
            assert AGENTIC_XBACKEND in text, "the demo's XBackend changed"
        text = text.replace(AGENTIC_XBACKEND, xbackend).replace(
            "group: agentic.networking.x-k8s.io\n", "group: gateway.networking.x-k8s.io\n")
        (d / f.name).write_text(text)
    return d


XBACKEND_TLS = {
    "none": "",
    "ca-configmap": ("    mode: ServerOnly\n    validation:\n      hostname: tools.demo.example\n"
                     "      caCertificateRefs: [{group: '', kind: ConfigMap, name: tools-ca}]\n"),
    "system-mtls": ("    mode: ClientAndServer\n    clientCertificateRef: {name: gw-client}\n"
                    "    validation: {hostname: tools.demo.example, wellKnownCACertificates: System}\n"),
}


@pytest.mark.parametrize("tls", XBACKEND_TLS)
def test_gateway_api_xbackend_renders_valid_objects(cli: Path, tmp_path: Path, crds: Crds, tls: str) -> None:
    """A Gateway API XBackend (valid for its vendored CRD): Envoy Gateway's rendering adds a Backend
    and the HTTPRoute turned to it, Istio's none; every object of both is valid for its vendored
    CRD (schema, defaults, CEL), and the validator refuses a Backend the CRD refuses."""
    d = gateway_api_demo(tmp_path, XBACKEND_TLS[tls])
    inputs = [o for f in sorted(d.glob("*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o]
    (xbackend,) = [o for o in inputs if o["kind"] == "XBackend"]
    assert validate(crds, xbackend) == [], validate(crds, xbackend)
    args = [str(d) if a == DEMO_MANIFESTS else a for a in EXAMPLE_ARGS]
    out = generate(cli, tmp_path, *args)
    for platform, objs in out.items():
        for obj in objs:
            assert crds.schema_for(obj) is not None, (platform, obj["kind"])
            assert validate(crds, obj) == [], (platform, yaml.safe_dump(obj))
    (backend,) = [o for o in out["envoy-gateway"] if o["kind"] == "Backend"]
    (route,) = [o for o in out["envoy-gateway"] if o["kind"] == "HTTPRoute"]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "tools"}]
    assert {o["kind"] for o in out["istio"]} == {"WasmPlugin", "EnvoyFilter"}
    broken = copy.deepcopy(backend)
    broken["spec"]["tls"] = {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "a"}],
                             "wellKnownCACertificates": "System"}
    assert any("must not contain both" in e for e in validate(crds, broken)), validate(crds, broken)


def test_generated_objects_carry_the_image_digest_and_bundle(
    generated: dict[str, list[dict[str, Any]]], cli: Path
) -> None:
    bundle = compiled_bundle(cli)
    hexdigest = EXAMPLE_DIGEST.split(":", 1)[1]
    eep, epp, ctp = generated["envoy-gateway"]
    wasm = eep["spec"]["wasm"][0]
    assert wasm["code"] == {"type": "Image", "image": {"url": EXAMPLE_IMAGE, "sha256": hexdigest},
                            "pullPolicy": "IfNotPresent"}
    assert wasm["failOpen"] is False
    assert wasm["config"]["policies"] == bundle["policies"]
    assert wasm["config"]["envoy"]["holdHeaders"] is True
    # Envoy Gateway's Envoy listens on the Gateway's port 443 shifted by 10000; the XBackend is known
    # by the cluster Envoy Gateway makes of the HTTPRoute rule that forwards to it.
    assert wasm["config"]["gateways"][0]["listeners"][0]["port"] == 10443
    assert [(b["name"], b["routeNames"], b["clusterNames"]) for b in wasm["config"]["backends"]] == [
        ("tools", [], ["httproute/demo/tools/rule/0"])]
    assert [p["operation"]["value"] if p["operation"].get("path") == "" else None
            for p in epp["spec"]["jsonPatches"]][0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0][
        "endpoint"]["address"]["socket_address"] == {"address": "risk-check.demo.svc.cluster.local", "port_value": 8080}
    assert ctp["spec"]["connection"]["bufferLimit"] == "2Mi"
    assert ctp["spec"]["path"] == {"escapedSlashesAction": "RejectRequest", "disableMergeSlashes": False}
    envoy_filter = next(o for o in generated["istio"] if o["kind"] == "EnvoyFilter")
    hcm_patch = envoy_filter["spec"]["configPatches"][0]["patch"]["value"]["typed_config"]
    assert {k: hcm_patch[k] for k in normalization()} == normalization()

    plugin = generated["istio"][0]["spec"]
    assert (plugin["url"], plugin["sha256"]) == (f"oci://{EXAMPLE_IMAGE}", hexdigest)
    assert (plugin["phase"], plugin["failStrategy"]) == ("AUTHZ", "FAIL_CLOSE")
    assert plugin["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "agents-gateway"}]
    assert plugin["pluginConfig"]["authorizers"][0]["cluster"] == "outbound|8080||risk-check.demo.svc.cluster.local"
    assert plugin["pluginConfig"]["envoy"]["holdHeaders"] is False
    assert plugin["pluginConfig"]["policies"] == bundle["policies"]
    assert plugin["pluginConfig"]["gateways"][0]["listeners"][0]["port"] == 443


def test_deploy_examples_are_what_the_cli_renders(cli: Path, tmp_path: Path) -> None:
    generate(cli, tmp_path, *EXAMPLE_ARGS)
    for p in PLATFORMS:
        assert (REPO / "envoy-demo" / "deploy" / f"{p}.yaml").read_text() == (tmp_path / f"{p}.yaml").read_text(), (
            f"envoy-demo/deploy/{p}.yaml is stale: regenerate it with "
            f"mcp-access manifests {' '.join(EXAMPLE_ARGS)} --platform {p} -o envoy-demo/deploy/{p}.yaml")


def test_cli_refuses_incomplete_inputs(cli: Path, tmp_path: Path) -> None:
    proc = run_manifests(cli, *COMPILE_ARGS, "--image", EXAMPLE_IMAGE, "--platform", "istio")
    assert proc.returncode == 2 and "--digest" in proc.stderr, proc.stderr
    proc = run_manifests(cli, *COMPILE_ARGS, "--image", EXAMPLE_IMAGE, "--digest", "sha256:1234", "--platform", "istio")
    assert proc.returncode == 2 and "64 hex digits" in proc.stderr, proc.stderr
    proc = run_manifests(cli, *EXAMPLE_ARGS, "--platform", "both")
    assert proc.returncode == 2 and "envoy-gateway" in proc.stderr, proc.stderr
    (tmp_path / "backend.yaml").write_text((REPO / DEMO_MANIFESTS / "gateway.yaml").read_text().split("---\n", 1)[1])
    proc = run_manifests(cli, "-f", str(tmp_path / "backend.yaml"), "--image", EXAMPLE_IMAGE, "--digest", EXAMPLE_DIGEST,
                         "--platform", "istio")
    assert proc.returncode == 1 and "nothing to attach the filter to" in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------
# The generated objects, rendered as each platform renders them, in real Envoy


def json_path_filter(doc: Any, name: str) -> list[dict[str, Any]]:
    """All http_filters entries named `name` anywhere in doc (the patch's ..http_filters[?(@.name==...)])."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "http_filters" and isinstance(v, list):
                found += [f for f in v if isinstance(f, dict) and f.get("name") == name]
            found += json_path_filter(v, name)
    elif isinstance(doc, list):
        for v in doc:
            found += json_path_filter(v, name)
    return found


def run_session(port: int, pki: Pki, mcp_server: Any, authz: Any) -> None:
    url = f"https://127.0.0.1:{port}/mcp"
    mcp_server.reset()
    authz.reset()
    with McpAgent(url, cert=pki.client(ALPHA), ca=pki.ca) as alpha, \
            McpAgent(url, cert=pki.client(BETA), ca=pki.ca) as beta:
        assert text_of(alpha.call_tool("echo", {"text": "hello"})) == "hello"
        assert text_of(beta.call_tool("get_weather", {"city": "Lisbon"})) == "sunny in Lisbon"
        for agent, tool in ((beta, "echo"), (alpha, "delete_repo"), (alpha, "add")):
            with pytest.raises(Denied) as denied:
                agent.call_tool(tool, {"text": "x"} if tool == "echo" else {"name": "x"} if tool == "delete_repo" else {"a": 1, "b": 2})
            assert denied.value.status == 403, tool
    assert sorted(mcp_server.tool_calls()) == ["echo", "get_weather"]
    asked = [c["headers"].get("x-mcp-tool") for c in authz.calls()]
    assert "add" in asked and "echo" in asked


@pytest.fixture(scope="module")
def demo_upstreams(work_dir: Path) -> Any:
    with start_mcp_server(work_dir / "logs", name="demo-tools") as mcp, \
            start_authorizer(work_dir / "logs", name="risk-check", deny_tools=["add"]) as authz:
        yield mcp, authz


def service_routed_demo(tmp: Path) -> list[str]:
    """EXAMPLE_ARGS with the demo's HTTPRoute pointing at the Service its XBackend names (how
    Envoy Gateway routes: Service, ServiceImport or its own Backend, never an XBackend)."""
    d = tmp / "service-routed"
    d.mkdir()
    for f in (REPO / DEMO_MANIFESTS).glob("*.yaml"):
        text = f.read_text()
        xbackend_ref = "    - group: agentic.networking.x-k8s.io\n      kind: XBackend\n      name: tools\n"
        if f.name == "gateway.yaml":
            assert xbackend_ref in text
            text = text.replace(xbackend_ref, "    - name: tools\n      port: 8080\n")
        (d / f.name).write_text(text)
    return [str(d) if a == DEMO_MANIFESTS else a for a in EXAMPLE_ARGS]


def test_envoy_gateway_routes_services_and_warns_about_xbackend_refs(cli: Path, tmp_path: Path) -> None:
    proc = run_manifests(cli, *EXAMPLE_ARGS, "--platform", "envoy-gateway")
    assert proc.returncode == 0 and "HTTPRoute demo/tools refers to an XBackend" in proc.stderr, proc.stderr
    proc = run_manifests(cli, *service_routed_demo(tmp_path), "--platform", "envoy-gateway")
    assert proc.returncode == 0 and "refers to an XBackend" not in proc.stderr, proc.stderr


def test_envoy_gateway_bundle_for_a_gateway_api_xbackend_is_the_service_routed_one(cli: Path, tmp_path: Path) -> None:
    """The demo with Gateway API's XBackend, routed through the rendered Backend, gives Envoy Gateway
    the same bundle as the demo routed to its Service: the backend is known by the rule's cluster
    either way, so the Envoy run of the service-routed rendering below covers it."""
    gateway_api = [str(gateway_api_demo(tmp_path)) if a == DEMO_MANIFESTS else a for a in EXAMPLE_ARGS]
    service = service_routed_demo(tmp_path)

    def bundle(args: list[str], name: str) -> Any:
        d = tmp_path / name
        d.mkdir()
        (eep,) = [o for o in generate(cli, d, *args, platforms=("envoy-gateway",))["envoy-gateway"]
                  if o["kind"] == "EnvoyExtensionPolicy"]
        return eep["spec"]["wasm"][0]["config"]

    via_backend = bundle(gateway_api, "via-backend")
    assert via_backend["backends"][0]["clusterNames"] == ["httproute/demo/tools/rule/0"], via_backend["backends"]
    assert via_backend == bundle(service, "via-service")


def test_envoy_gateway_grants_cross_namespace_routes_with_a_valid_reference_grant(
    cli: Path, tmp_path: Path, crds: Crds
) -> None:
    """A route in `demo` to a Gateway API XBackend in `tools` (allowed by a ReferenceGrant there): the
    rendered Backend is in `tools` with a ReferenceGrant for it, both valid for their CRDs."""
    d = gateway_api_demo(tmp_path)
    gw = d / "gateway.yaml"
    text = gw.read_text()
    xbackend_ref = "kind: XBackend\n      name: tools\n"
    assert xbackend_ref in text
    text = text.replace("metadata: {name: tools, namespace: demo}", "metadata: {name: tools, namespace: tools}")
    text = text.replace(xbackend_ref, xbackend_ref + "      namespace: tools\n")
    text += ("---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n"
             "metadata: {name: routes, namespace: tools}\nspec:\n"
             "  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: demo}]\n"
             "  to: [{group: gateway.networking.x-k8s.io, kind: XBackend}]\n")
    gw.write_text(text)
    policies = d / "policies.yaml"
    docs = [doc.replace("namespace: demo", "namespace: tools") if "kind: XBackend" in doc else doc
            for doc in policies.read_text().split("\n---\n")]
    policies.write_text("\n---\n".join(docs))
    args = [str(d) if a == DEMO_MANIFESTS else a for a in EXAMPLE_ARGS]
    objs = generate(cli, tmp_path, *args, platforms=("envoy-gateway",))["envoy-gateway"]
    (grant,) = [o for o in objs if o["kind"] == "ReferenceGrant"]
    (backend,) = [o for o in objs if o["kind"] == "Backend"]
    assert grant["metadata"]["namespace"] == backend["metadata"]["namespace"] == "tools"
    for obj in objs:
        assert validate(crds, obj) == [], yaml.safe_dump(obj)


def test_envoy_gateway_rendering_enforces_the_demo(
    demo_upstreams: Any, envoy: StartEnvoy, pki: Pki, wasm_path: Path, tmp_path: Path, work_dir: Path, cli: Path
) -> None:
    """The demo with its HTTPRoute to the Service, as Envoy Gateway routes it: the bundle knows the
    XBackend by the cluster Envoy Gateway names for the rule."""
    mcp, authz = demo_upstreams
    port = free_port()  # the Gateway listener's port here (not privileged: Envoy Gateway keeps it)
    eep, epp, ctp = generate(cli, tmp_path, *service_routed_demo(tmp_path), "--listen", f"mcp-mtls={port}",
                             platforms=("envoy-gateway",))["envoy-gateway"]
    assert eep["spec"]["wasm"][0]["config"]["backends"][0]["clusterNames"] == ["httproute/demo/tools/rule/0"]
    wasm = eep["spec"]["wasm"][0]
    route_cluster = "httproute/demo/tools/rule/0"  # what Envoy Gateway names the HTTPRoute rule's cluster
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener("mcp", port, [Route("tools-route", "/mcp", route_cluster, timeout=30)],
                            tls=Tls(pki.server, pki.ca),
                            wasm=Wasm(wasm_path, json.dumps(wasm["config"]), root_id=wasm["rootID"],
                                      allow_on_headers_stop_iteration=False, fail_open=wasm["failOpen"]),
                            normalize=False)],
        clusters=[Cluster(route_cluster, port=mcp.port)],
        access_log_path=work_dir / f"access-eg-{port}.log",
    )
    listener = cfg["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    filter_name = f"envoy.filters.http.wasm/envoyextensionpolicy/demo/{eep['metadata']['name']}/wasm/0"
    hcm["http_filters"][0]["name"] = filter_name  # as Envoy Gateway names it
    assert hcm["http_filters"][0]["typed_config"]["config"]["allow_on_headers_stop_iteration"] is False
    # The EnvoyPatchPolicy: clusters added whole, the listener patched through its JSONPath.
    for patch in epp["spec"]["jsonPatches"]:
        op = patch["operation"]
        if patch["type"].endswith("Cluster"):
            assert op["op"] == "add" and op["path"] == ""
            cluster = copy.deepcopy(op["value"])
            addr = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
            assert addr["address"] == "risk-check.demo.svc.cluster.local"
            addr.update(address="127.0.0.1", port_value=authz.port)  # no cluster DNS here
            cfg["static_resources"]["clusters"].append(cluster)
        elif patch["name"] == "demo/agents-gateway/mcp-jwt":
            continue  # the demo's second listener: not part of this bootstrap
        else:
            assert patch["name"] == "demo/agents-gateway/mcp-mtls"
            targets = json_path_filter(listener, filter_name)
            assert len(targets) == 1, "the patch's JSONPath must find the filter Envoy Gateway generates"
            assert op["op"] == "add" and op["path"] == "/typed_config/config/allow_on_headers_stop_iteration"
            targets[0]["typed_config"]["config"]["allow_on_headers_stop_iteration"] = op["value"]
    # The ClientTrafficPolicy's bufferLimit becomes the listener's per-connection buffer limit.
    limit = ctp["spec"]["connection"]["bufferLimit"]
    assert limit.endswith("Mi")
    listener["per_connection_buffer_limit_bytes"] = int(limit[:-2]) * 1024 * 1024
    # Its path settings, on top of the normalization Envoy Gateway always turns on.
    path = ctp["spec"]["path"]
    hcm.update(normalize_path=True, merge_slashes=not path["disableMergeSlashes"],
               path_with_escaped_slashes_action={"RejectRequest": "REJECT_REQUEST"}[path["escapedSlashesAction"]])
    envoy(cfg)
    run_session(port, pki, mcp, authz)


def test_istio_rendering_enforces_the_demo_without_holding_headers(
    demo_upstreams: Any, envoy: StartEnvoy, pki: Pki, wasm_path: Path, tmp_path: Path, work_dir: Path, cli: Path
) -> None:
    mcp, authz = demo_upstreams
    port = free_port()
    generated_istio = generate(cli, tmp_path, *EXAMPLE_ARGS, "--listen", f"mcp-mtls={port}",
                               platforms=("istio",))["istio"]
    plugin = generated_istio[0]["spec"]
    config = plugin["pluginConfig"]
    assert config["envoy"]["holdHeaders"] is False
    authz_cluster = config["authorizers"][0]["cluster"]
    tools_cluster = config["backends"][0]["clusterNames"][0]
    assert (authz_cluster, tools_cluster) == ("outbound|8080||risk-check.demo.svc.cluster.local",
                                              "outbound|8080||tools.demo.svc.cluster.local")
    # Istio: the pluginConfig is handed to the filter as JSON text; fail closed; no header holding.
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener("mcp", port, [Route("tools-route", "/mcp", tools_cluster, timeout=30)],
                            tls=Tls(pki.server, pki.ca),
                            wasm=Wasm(wasm_path, json.dumps(config), root_id=plugin["pluginName"],
                                      allow_on_headers_stop_iteration=False,
                                      fail_open=plugin["failStrategy"] != "FAIL_CLOSE"),
                            normalize=False)],
        clusters=[Cluster(tools_cluster, port=mcp.port), Cluster(authz_cluster, port=authz.port)],
        access_log_path=work_dir / f"access-istio-{port}.log",
    )
    # The EnvoyFilter's merge patch of the HttpConnectionManager.
    envoy_filter = generated_istio[1]
    assert envoy_filter["kind"] == "EnvoyFilter"
    patch = dict(envoy_filter["spec"]["configPatches"][0]["patch"]["value"]["typed_config"])
    patch.pop("@type")
    cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"].update(patch)
    envoy(cfg)
    run_session(port, pki, mcp, authz)


def test_istio_envoy_filter_rendering_holds_headers(
    demo_upstreams: Any, envoy: StartEnvoy, pki: Pki, wasm_path: Path, tmp_path: Path, work_dir: Path, cli: Path,
    crds: Crds,
) -> None:
    """`--istio-hold-headers`: no WasmPlugin; an EnvoyFilter adds the filter as an extension config
    (the OCI image and digest istio-agent resolves to a local file, as it does for WasmPlugins) with
    allow_on_headers_stop_iteration, and inserts it before the router by discovery. Run here as
    istio-agent hands it to Envoy (the module as a local file), it holds headers and enforces."""
    mcp, authz = demo_upstreams
    port = free_port()
    objects = generate(cli, tmp_path, *EXAMPLE_ARGS, "--listen", f"mcp-mtls={port}", "--istio-hold-headers",
                       platforms=("istio",))["istio"]
    assert [o["kind"] for o in objects] == ["EnvoyFilter", "EnvoyFilter"]
    for o in objects:
        assert validate(crds, o) == [], validate(crds, o)
    extension, insert = objects[0]["spec"]["configPatches"]
    assert extension["applyTo"] == "EXTENSION_CONFIG" and extension["patch"]["operation"] == "ADD"
    wasm = extension["patch"]["value"]["typed_config"]["config"]
    assert wasm["allow_on_headers_stop_iteration"] is True and wasm["fail_open"] is False
    remote = wasm["vm_config"]["code"]["remote"]
    assert remote["http_uri"]["uri"].startswith("oci://") and len(remote["sha256"]) == 64
    config = json.loads(wasm["configuration"]["value"])
    assert config["envoy"]["holdHeaders"] is True
    assert insert["applyTo"] == "HTTP_FILTER" and insert["patch"]["operation"] == "INSERT_BEFORE"
    assert insert["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"] == "envoy.filters.http.router"
    assert insert["patch"]["value"]["config_discovery"]["type_urls"] == [
        extension["patch"]["value"]["typed_config"]["@type"]]
    tools_cluster = config["backends"][0]["clusterNames"][0]
    authz_cluster = config["authorizers"][0]["cluster"]
    cfg = build_bootstrap(
        admin_port=free_port(),
        listeners=[Listener("mcp", port, [Route("tools-route", "/mcp", tools_cluster, timeout=30)],
                            tls=Tls(pki.server, pki.ca),
                            wasm=Wasm(wasm_path, wasm["configuration"]["value"], root_id=wasm["root_id"],
                                      allow_on_headers_stop_iteration=True, fail_open=False),
                            normalize=False)],
        clusters=[Cluster(tools_cluster, port=mcp.port), Cluster(authz_cluster, port=authz.port)],
        access_log_path=work_dir / f"access-istio-hold-{port}.log",
    )
    patch = dict(objects[1]["spec"]["configPatches"][0]["patch"]["value"]["typed_config"])
    patch.pop("@type")
    cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"].update(patch)
    envoy(cfg)
    run_session(port, pki, mcp, authz)
    # Held headers: no request the filter denied reached the MCP server at all.
    assert all(r.get("tool") in (None, "echo", "get_weather") for r in mcp.requests())
