"""The chart with security on (values-secure.yaml: TLS from a cert-manager Certificate, HS256 tokens,
authorization; and a render with a TLS Secret of one's own and RS256): every Herald pod mounts what
it needs read-only, each service gets the settings docs/security.md names for it, service URLs become
herald+ssl://, probes stay on plain HTTP, the Certificate names every Service, and incomplete security
values are refused. With mutual TLS the dlq-worker and the operator present the certificate; with
metricsEndpoint every /metrics asks for a token over HTTPS and the monitors send it."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from herald.broker.settings import BrokerSettings
from herald.client import AuthenticationToken
from herald.client.admin import AdminClient
from herald.common.config import load_settings
from herald.common.http.metrics_access import MetricsAccess
from herald.common.security.service import ServiceSecurity
from herald.common.security.tokens import create_token, new_secret_key
from herald.dlq.settings import DlqWorkerSettings
from herald.dlq.worker import DlqWorker
from herald.lookup.settings import LookupSettings
from herald.proxy.settings import ProxySettings
from herald.storage.node.settings import StorageSettings
from herald_operator.settings import load_settings as load_operator_settings

from tests.chart.render import (
    NAMESPACE,
    PRODUCTION_VALUES,
    SECURE_VALUES,
    Manifest,
    component_name,
    component_of,
    containers,
    named,
    of_kind,
    pod_spec,
    render,
    render_failure,
    workloads,
)
from tests.chart.test_chart import FOREIGN_KINDS, validate

# Mutual TLS with every component on, and /metrics behind a bearer token over HTTPS (on the secure values).
PROTECTED_RENDER = ("tls.requireClientCert=true", "metricsEndpoint.tokenSecret=herald-metrics-token",
                    "metricsEndpoint.tls=true")
METRICS_SERVERS = ("lookup", "broker", "storage", "proxy", "dlq-worker")
# TLS from a Secret of one's own, RS256, an audience; authorization off.
OWN_SECRET_RENDER = (
    "tls.enabled=true", "tls.secretName=herald-certs", "auth.enabled=true", "auth.publicKeySecret=herald-jwt-public",
    "auth.audience=herald", "auth.tokens.brokerSecret=t-broker", "auth.tokens.proxySecret=t-proxy",
    "auth.tokens.dlqWorkerSecret=t-dlq", "auth.tokens.operatorSecret=t-operator",
)
SERVERS = ("lookup", "broker", "storage", "proxy")
CLIENTS = ("dlq-worker", "operator")
LOOKUP_URL = f"herald+ssl://{component_name('lookup')}.{NAMESPACE}.svc.cluster.local:6660"


@pytest.fixture(scope="module")
def own_secret_manifests() -> list[Manifest]:
    return render(sets=OWN_SECRET_RENDER)


@pytest.fixture(scope="module", params=["cert-manager", "own-secret"])
def secured(request: pytest.FixtureRequest, secure_manifests: list[Manifest],
            own_secret_manifests: list[Manifest]) -> list[Manifest]:
    return secure_manifests if request.param == "cert-manager" else own_secret_manifests


def _herald_workloads(manifests: list[Manifest]) -> dict[str, Manifest]:
    found = {component_of(w): w for w in workloads(manifests) if component_of(w) not in ("redis", "etcd")}
    assert set(found) == {*SERVERS, *CLIENTS}
    return found


def _container(workload: Manifest) -> dict[str, Any]:
    (container,) = containers(workload)
    return container


def _env(workload: Manifest) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _container(workload)["env"] if "value" in e}


def _mounts(workload: Manifest) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in _container(workload)["volumeMounts"]}


def _secret_volumes(workload: Manifest) -> dict[str, dict[str, Any]]:
    return {v["name"]: v["secret"] for v in pod_spec(workload)["volumes"] if "secret" in v}


def _prefix(component: str) -> str:
    return f"HERALD_{component.upper().replace('-', '_')}_"


def test_every_herald_pod_mounts_the_certificate_secret_read_only(secured: list[Manifest]) -> None:
    secret = of_kind(secured, "Certificate")[0]["spec"]["secretName"] if of_kind(secured, "Certificate") \
        else "herald-certs"
    for component, workload in _herald_workloads(secured).items():
        mount = _mounts(workload)["/etc/herald/tls"]
        assert mount["readOnly"] is True, component
        volume = _secret_volumes(workload)[mount["name"]]
        assert volume["secretName"] == secret, component
        if component in CLIENTS:  # a client only needs the CA: the key stays out of its pod
            assert volume["items"] == [{"key": "ca.crt", "path": "ca.crt"}], component
        else:
            assert "items" not in volume, component


def test_servers_serve_tls_and_dial_each_other_with_the_ca(secured: list[Manifest]) -> None:
    for component in SERVERS:
        env = _env(_herald_workloads(secured)[component])
        prefix = _prefix(component)
        assert env[prefix + "TLS_CERT_FILE"] == "/etc/herald/tls/tls.crt"
        assert env[prefix + "TLS_KEY_FILE"] == "/etc/herald/tls/tls.key"
        assert env[prefix + "TLS_CA_FILE"] == "/etc/herald/tls/ca.crt"
        assert env[prefix + "TLS_REQUIRE_CLIENT_CERT"] == "false"
        # Brokers are dialled at pod IPs: the name expected instead is the broker Service's.
        assert env[prefix + "TLS_SERVER_NAME"] == f"{component_name('broker')}.{NAMESPACE}.svc.cluster.local"


def test_servers_authenticate_with_the_token_key(secure_manifests: list[Manifest],
                                                 own_secret_manifests: list[Manifest]) -> None:
    for manifests, setting, path, secret in (
            (secure_manifests, "TOKEN_SECRET_KEY_FILE", "/etc/herald/token-key/secret.key", "herald-token-key"),
            (own_secret_manifests, "TOKEN_PUBLIC_KEY_FILE", "/etc/herald/token-key/public.pem", "herald-jwt-public")):
        for component in SERVERS:
            workload = _herald_workloads(manifests)[component]
            env = _env(workload)
            assert env[_prefix(component) + "AUTHENTICATION_ENABLED"] == "true"
            assert env[_prefix(component) + setting] == path
            volume = _secret_volumes(workload)[_mounts(workload)["/etc/herald/token-key"]["name"]]
            assert volume["secretName"] == secret
            assert [item["path"] for item in volume["items"]] == [path.rsplit("/", 1)[1]]
    for component in SERVERS:
        audience = _prefix(component) + "TOKEN_AUDIENCE"
        assert _env(_herald_workloads(own_secret_manifests)[component])[audience] == "herald"
        assert audience not in _env(_herald_workloads(secure_manifests)[component])


def test_each_service_that_calls_others_gets_its_own_token(secure_manifests: list[Manifest]) -> None:
    expected = {"broker": "herald-token-broker", "proxy": "herald-token-proxy",
                "dlq-worker": "herald-token-dlq-worker", "operator": "herald-token-operator"}
    for component, workload in _herald_workloads(secure_manifests).items():
        env = _env(workload)
        if component not in expected:  # lookup and storage nodes call no other service
            assert "/etc/herald/token" not in _mounts(workload) and _prefix(component) + "AUTH_TOKEN_FILE" not in env
            continue
        assert env[_prefix(component) + "AUTH_TOKEN_FILE"] == "/etc/herald/token/token", component
        mount = _mounts(workload)["/etc/herald/token"]
        volume = _secret_volumes(workload)[mount["name"]]
        assert mount["readOnly"] is True and "subPath" not in mount, "a subPath would miss a rotated token"
        assert volume["secretName"] == expected[component], component
        assert volume["items"] == [{"key": "token", "path": "token"}]
        assert "/etc/herald/token-key" not in _mounts(workload) or component in SERVERS


def test_the_dlq_worker_and_the_operator_dial_lookup_over_tls_with_the_ca(secured: list[Manifest]) -> None:
    by_component = _herald_workloads(secured)
    assert f"--url={LOOKUP_URL}" in _container(by_component["dlq-worker"])["args"]
    assert f"--url={LOOKUP_URL}" in _container(by_component["operator"])["args"]
    for component in CLIENTS:
        assert _env(by_component[component])[_prefix(component) + "TLS_TRUST_CERTS_FILE"] == "/etc/herald/tls/ca.crt"
    for manifest in secured:
        text = str(manifest)
        assert "herald://" not in text, f"{manifest['kind']}/{manifest['metadata']['name']} names a plaintext URL"


def test_without_tls_the_urls_stay_plaintext(default_manifests: list[Manifest]) -> None:
    by_component = _herald_workloads(default_manifests)
    assert any(a.startswith("--url=herald://") for a in _container(by_component["dlq-worker"])["args"])
    for workload in by_component.values():
        assert not [m for m in _mounts(workload) if m.startswith("/etc/herald")]
        assert not [v for v in _env(workload) if "TLS" in v or "AUTH" in v]
    assert not of_kind(default_manifests, "Certificate")


def test_authorization_settings_follow_each_service_s_role(secure_manifests: list[Manifest]) -> None:
    by_component = _herald_workloads(secure_manifests)
    roles = {"SUPERUSER_ROLES": "operator,admin", "BROKER_ROLES": "broker", "PROXY_ROLES": "proxy",
             "DLQ_WORKER_ROLES": "dlq-worker"}
    expected = {
        "lookup": roles, "broker": roles,
        # storage nodes serve brokers (and super-users) only.
        "storage": {k: v for k, v in roles.items() if k in ("SUPERUSER_ROLES", "BROKER_ROLES")},
        "proxy": {},  # it authenticates clients; lookup and the brokers authorize them
    }
    for component, settings in expected.items():
        env = _env(by_component[component])
        found = {name.removeprefix(_prefix(component)): value for name, value in env.items()
                 if name.endswith("_ROLES") or name.endswith("AUTHORIZATION_ENABLED")}
        want = {**settings, "AUTHORIZATION_ENABLED": "true"} if settings else {}
        assert found == want, component


def test_probes_stay_on_plain_http(secured: list[Manifest]) -> None:
    for component, workload in _herald_workloads(secured).items():
        if component == "operator":
            continue
        container = _container(workload)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            action = container[probe]["httpGet"]
            assert action.get("scheme", "HTTP") == "HTTP" and action["port"] == "metrics", (component, probe)


def test_the_cert_manager_certificate_names_every_service(secure_manifests: list[Manifest]) -> None:
    (certificate,) = of_kind(secure_manifests, "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert certificate["metadata"]["name"] == "herald"
    assert certificate["metadata"]["labels"]["app.kubernetes.io/instance"] == "herald"
    spec = certificate["spec"]
    assert set(spec) <= {"secretName", "dnsNames", "duration", "renewBefore", "privateKey", "usages", "issuerRef"}
    assert spec["secretName"] == "herald-tls"
    assert spec["issuerRef"] == {"name": "herald-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert {"server auth", "client auth"} <= set(spec["usages"]), "services present it when they dial"
    assert spec["privateKey"]["algorithm"] in ("ECDSA", "RSA", "Ed25519")
    names = spec["dnsNames"]
    assert len(names) == len(set(names)) and all(isinstance(n, str) and n for n in names)
    domain = f"{NAMESPACE}.svc.cluster.local"
    for service in of_kind(secure_manifests, "Service"):
        name = service["metadata"]["name"]
        if component_of(service) in ("redis", "etcd"):
            continue  # Redis and the in-chart etcd speak plaintext to the services
        assert f"{name}.{domain}" in names, name
        if service["spec"].get("clusterIP") != "None":
            assert {name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc"} <= set(names), name
    storage = named(secure_manifests, "StatefulSet", component_name("storage"))
    for i in range(storage["spec"]["replicas"]):
        assert f"{component_name('storage')}-{i}.{component_name('storage')}-headless.{domain}" in names
    server_name = _env(_herald_workloads(secure_manifests)["broker"])["HERALD_BROKER_TLS_SERVER_NAME"]
    assert server_name in names


def test_the_certificate_takes_extra_names_and_a_cluster_issuer() -> None:
    manifests = render(SECURE_VALUES, sets=("tls.certManager.extraDnsNames={herald.example.com}",
                                            "tls.certManager.issuerRef.kind=ClusterIssuer", "proxy.enabled=false",
                                            "auth.authorization.enabled=false"))
    (certificate,) = of_kind(manifests, "Certificate")
    assert "herald.example.com" in certificate["spec"]["dnsNames"]
    assert not [n for n in certificate["spec"]["dnsNames"] if "proxy" in n]
    assert certificate["spec"]["issuerRef"]["kind"] == "ClusterIssuer"


def test_mutual_tls_is_required_when_asked() -> None:
    manifests = render(sets=("tls.enabled=true", "tls.secretName=herald-certs", "tls.requireClientCert=true",
                             "dlqWorker.enabled=false", "operator.enabled=false"))
    for component, workload in {component_of(w): w for w in workloads(manifests)}.items():
        if component != "redis":
            assert _env(workload)[_prefix(component) + "TLS_REQUIRE_CLIENT_CERT"] == "true"


@pytest.fixture(scope="module")
def protected_manifests() -> list[Manifest]:
    return render(PRODUCTION_VALUES, SECURE_VALUES, sets=PROTECTED_RENDER)


def test_the_protected_render_is_valid_for_the_pinned_kubernetes_version(protected_manifests: list[Manifest]) -> None:
    for manifest in protected_manifests:
        if manifest["kind"] not in FOREIGN_KINDS:
            validate(manifest)


def test_with_mutual_tls_the_dlq_worker_and_the_operator_present_the_certificate(
    protected_manifests: list[Manifest],
) -> None:
    by_component = _herald_workloads(protected_manifests)
    for component in SERVERS:
        assert _env(by_component[component])[_prefix(component) + "TLS_REQUIRE_CLIENT_CERT"] == "true"
    for component in CLIENTS:
        workload = by_component[component]
        env = _env(workload)
        assert env[_prefix(component) + "TLS_CERT_FILE"] == "/etc/herald/tls/tls.crt", component
        assert env[_prefix(component) + "TLS_KEY_FILE"] == "/etc/herald/tls/tls.key", component
        assert env[_prefix(component) + "AUTH_TOKEN_FILE"] == "/etc/herald/token/token", component  # still its role
        mount = _mounts(workload)["/etc/herald/tls"]
        assert mount["readOnly"] is True
        assert "items" not in _secret_volumes(workload)[mount["name"]], f"{component} needs tls.key too"


def test_with_metrics_protected_every_endpoint_asks_for_the_token_over_https(
    protected_manifests: list[Manifest],
) -> None:
    by_component = _herald_workloads(protected_manifests)
    for component in METRICS_SERVERS:
        workload = by_component[component]
        env = _env(workload)
        prefix = _prefix(component) + "METRICS_"
        assert env[prefix + "AUTH_TOKEN_FILE"] == "/etc/herald/metrics-token/token", component
        assert env[prefix + "TLS_CERT_FILE"] == "/etc/herald/tls/tls.crt", component
        assert env[prefix + "TLS_KEY_FILE"] == "/etc/herald/tls/tls.key", component
        mount = _mounts(workload)["/etc/herald/metrics-token"]
        assert mount["readOnly"] is True and "subPath" not in mount, "a subPath would miss a rotated token"
        assert _secret_volumes(workload)[mount["name"]] == {
            "secretName": "herald-metrics-token", "items": [{"key": "token", "path": "token"}], "defaultMode": 0o440}
        container = _container(workload)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):  # the kubelet sends no token
            assert container[probe]["httpGet"]["scheme"] == "HTTPS", (component, probe)
    operator = by_component["operator"]  # its reconcile metrics are plain HTTP, without tokens
    assert not [name for name in _env(operator) if "METRICS" in name]
    assert "/etc/herald/metrics-token" not in _mounts(operator)


def test_with_metrics_protected_the_monitors_send_the_token_over_https(protected_manifests: list[Manifest]) -> None:
    # The operator's own /metrics (reconcile counts by kind, no tenant's names) is plain HTTP.
    monitors = [m for m in protected_manifests if m["kind"] in ("ServiceMonitor", "PodMonitor")
                and component_of(m) != "operator"]
    assert {component_of(m) for m in monitors} == set(METRICS_SERVERS)
    server_name = _env(_herald_workloads(protected_manifests)["broker"])["HERALD_BROKER_TLS_SERVER_NAME"]
    for monitor in monitors:
        spec = monitor["spec"]
        for endpoint in spec["endpoints"] if monitor["kind"] == "ServiceMonitor" else spec["podMetricsEndpoints"]:
            assert endpoint["authorization"] == {
                "type": "Bearer", "credentials": {"name": "herald-metrics-token", "key": "token"}}
            assert endpoint["scheme"] == "https"
            assert endpoint["tlsConfig"] == {"ca": {"secret": {"name": "herald-tls", "key": "ca.crt"}},
                                             "serverName": server_name}


def test_metrics_stay_open_and_plain_unless_asked(secure_manifests: list[Manifest]) -> None:
    for component, workload in _herald_workloads(secure_manifests).items():
        assert not [name for name in _env(workload) if "METRICS_" in name and "PORT" not in name], component
        assert "/etc/herald/metrics-token" not in _mounts(workload), component


SECURE = (SECURE_VALUES,)


@pytest.mark.parametrize(("values", "sets", "message"), [
    ((), ("tls.enabled=true",), "set tls.secretName"),
    ((), ("tls.certManager.enabled=true",), "tls.certManager.enabled needs tls.enabled"),
    ((), ("tls.enabled=true", "tls.certManager.enabled=true"), "set tls.certManager.issuerRef.name"),
    ((), ("metricsEndpoint.tls=true",), "metricsEndpoint.tls serves /metrics with the TLS certificate: it needs "
                                        "tls.enabled"),
    ((), ("auth.enabled=true",), "set one of auth.secretKeySecret"),
    (SECURE, ("auth.publicKeySecret=p",), "set one of auth.secretKeySecret"),
    (SECURE, ("auth.tokens.brokerSecret=",), "set auth.tokens.brokerSecret"),
    (SECURE, ("auth.tokens.operatorSecret=",), "set auth.tokens.operatorSecret"),
    ((), ("auth.authorization.enabled=true",), "auth.authorization.enabled needs auth.enabled"),
    (SECURE, ("auth.superuserRoles=null",), "the operator creates tenants' topics"),
    (SECURE, ("auth.brokerRoles=null",), "auth.brokerRoles, auth.proxyRoles and auth.dlqWorkerRoles"),
    (SECURE, ("tls.certManager.issuerRef.kind=Cluster",), "tls/certManager/issuerRef/kind"),
    (SECURE, ("auth.superuserRoles={a\\,b}",), "auth/superuserRoles/0"),
], ids=["tls-without-secret", "cert-manager-without-tls", "cert-manager-without-issuer", "metrics-tls-without-tls",
        "auth-without-key", "auth-with-two-keys", "auth-without-broker-token", "auth-without-operator-token",
        "authorization-without-auth", "authorization-without-superuser", "authorization-without-broker-roles",
        "unknown-issuer-kind", "role-with-a-comma"])
def test_incomplete_security_values_are_refused(values: tuple[Any, ...], sets: tuple[str, ...], message: str) -> None:
    error = render_failure(*values, sets=sets)
    assert message in error, error


def test_secure_values_layer_on_production(secure_manifests: list[Manifest]) -> None:
    production = render(PRODUCTION_VALUES)
    assert named(secure_manifests, "Deployment", component_name("broker"))["spec"]["replicas"] == \
        named(production, "Deployment", component_name("broker"))["spec"]["replicas"] == 3


Issuer = tuple[x509.Name, ec.EllipticCurvePrivateKey]


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: Issuer | None, names: list[str]) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1)))
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _write_secrets(directory: Path, names: list[str]) -> None:
    """Files as the Secrets of values-secure.yaml give them, under `directory` for /etc/herald: what
    cert-manager would issue for the Certificate's names, the token key, a service token."""
    tls = directory / "tls"
    tls.mkdir()
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    (tls / "ca.crt").write_bytes(_certificate("herald-ca", ca_key, None, []))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "herald-ca")])
    (tls / "tls.crt").write_bytes(_certificate(names[0], key, (ca_name, ca_key), names))
    (tls / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    (directory / "token-key").mkdir()
    (directory / "token-key" / "secret.key").write_bytes(new_secret_key())
    (directory / "token").mkdir()
    (directory / "token" / "token").write_text(
        create_token("broker", secret_key=(directory / "token-key" / "secret.key").read_bytes()))


def test_the_security_files_and_settings_make_a_working_service_security(
        secure_manifests: list[Manifest], tmp_path: Path) -> None:
    """What each server builds at start from its env and the mounted files (an unreadable file or a
    contradictory setting would fail here, as in the pod): TLS credentials, the token check, and a
    dialer that speaks TLS with the service's token."""
    (certificate,) = of_kind(secure_manifests, "Certificate")
    _write_secrets(tmp_path, certificate["spec"]["dnsNames"])
    settings_classes: dict[str, type[Any]] = {
        "lookup": LookupSettings, "broker": BrokerSettings, "storage": StorageSettings, "proxy": ProxySettings}
    for component, workload in _herald_workloads(secure_manifests).items():
        env = {name: value.replace("/etc/herald", str(tmp_path)) for name, value in _env(workload).items()}
        if component not in settings_classes:
            trusted = env[_prefix(component) + "TLS_TRUST_CERTS_FILE"]
            assert Path(trusted).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----"), component
            assert Path(env[_prefix(component) + "AUTH_TOKEN_FILE"]).is_file(), component
            continue
        settings = load_settings(settings_classes[component], component, environ=env)
        security = ServiceSecurity(settings)
        assert security.server_credentials is not None and security.interceptors, component
        assert security.dialer.tls, component
        assert (security.token is not None) == (component in ("broker", "proxy")), component


def test_the_protected_render_s_files_and_settings_make_working_endpoints_and_clients(
        protected_manifests: list[Manifest], tmp_path: Path) -> None:
    """What each pod builds at start with mutual TLS and protected metrics: the metrics endpoint's
    token check and HTTPS context, and the clients' certificate (unreadable files fail here)."""
    (certificate,) = of_kind(protected_manifests, "Certificate")
    _write_secrets(tmp_path, certificate["spec"]["dnsNames"])
    (tmp_path / "metrics-token").mkdir()
    (tmp_path / "metrics-token" / "token").write_text("scrape-me\n")
    settings_classes: dict[str, type[Any]] = {
        "lookup": LookupSettings, "broker": BrokerSettings, "storage": StorageSettings, "proxy": ProxySettings,
        "dlq-worker": DlqWorkerSettings}
    for component, workload in _herald_workloads(protected_manifests).items():
        env = {name: value.replace("/etc/herald", str(tmp_path)) for name, value in _env(workload).items()}
        if component == "operator":
            operator = load_operator_settings(None, {"admin_url": LOOKUP_URL}, environ=env)
            AdminClient(operator.admin_url, auth=AuthenticationToken.from_file(operator.auth_token_file),
                        tls_trust_certs_file_path=operator.tls_trust_certs_file,
                        tls_certificate_file_path=operator.tls_cert_file,
                        tls_private_key_file_path=operator.tls_key_file)
            continue
        overrides = {"service_url": LOOKUP_URL} if component == "dlq-worker" else {}
        settings = load_settings(settings_classes[component], component, environ=env, overrides=overrides)
        access = MetricsAccess(settings)
        assert access.token_required and access.ssl_context is not None, component
        assert access.check("Bearer scrape-me") is None and access.check(None) is not None, component
        if component == "dlq-worker":
            DlqWorker(settings)  # its client and admin configuration, certificate included
            assert (settings.tls_cert_file, settings.tls_key_file) == (
                f"{tmp_path}/tls/tls.crt", f"{tmp_path}/tls/tls.key")
