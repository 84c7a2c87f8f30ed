"""deploy/k8s against the Kubernetes API schemas and against the code: every manifest validates offline
(kubernetes-validate's bundled OpenAPI schemas, strict: unknown fields fail), and the pieces fit together
— probes on the right paths and ports, non-root pods with resources, Services that select their pods,
autoscalers on existing Deployments, every setting a service reads from the ConfigMap or the Secret
present there, and only the gateway reachable from outside."""
from __future__ import annotations

import re
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions
from pydantic_settings import BaseSettings
from sqlalchemy.engine import make_url

from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.settings import Settings as ChatSettings
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.settings import Settings as RetrievalSettings
from shared.settings import PLACEHOLDER_SERVICE_TOKEN
from shared.tracing import otlp_endpoint_configured
from tests.support import app_routes

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# The Kubernetes release whose schemas the manifests are checked against (one kubernetes-validate bundles).
K8S_VERSION = "1.33"
NAMESPACE = "cairn"
OPTIONAL_MANIFESTS = {"ingress.yaml"}  # applied on its own, not through kustomization.yaml
SETTINGS: dict[str, type[BaseSettings]] = {
    "gateway": GatewaySettings, "chat": ChatSettings, "retrieval": RetrievalSettings, "analytics": AnalyticsSettings,
}
PORTS = {"gateway": 8000, "chat": 8001, "retrieval": 8002, "analytics": 8003}
AUTOSCALED = {"chat", "retrieval"}
NON_ROOT_UID = 10001  # the `cairn` user of every Cairn image (services/*/Dockerfile)
# Environment variables a Cairn container gets for a library rather than for Cairn's own settings.
LIBRARY_ENV = {"HF_HOME"}
# ConfigMap keys read by the OpenTelemetry SDK (shared/tracing.py), not by Cairn's settings.
TRACING_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT"}


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


MANIFEST_FILES = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
RESOURCES = [(path.name, doc) for path in MANIFEST_FILES for doc in _load(path)]
KUSTOMIZATION = _load(K8S / "kustomization.yaml")[0]


def _of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in RESOURCES if doc["kind"] == kind}


DEPLOYMENTS = _of_kind("Deployment")
STATEFULSETS = _of_kind("StatefulSet")
SERVICES = _of_kind("Service")
CONFIG = _of_kind("ConfigMap")["cairn-config"]["data"]
SECRET = _of_kind("Secret")["cairn-secrets"]["stringData"]
WORKLOADS = {**DEPLOYMENTS, **STATEFULSETS}


def _container(name: str) -> dict[str, Any]:
    (container,) = DEPLOYMENTS[name]["spec"]["template"]["spec"]["containers"]
    return container


def _env_names(settings: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings class reads (pydantic-settings matches them case-insensitively)."""
    names = set()
    for name, field in settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", [alias] if alias else [name])
        names |= {str(choice).upper() for choice in choices}
    return names


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to resolve or connect fails the test: the validator must use only its bundled schemas."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the schema validator tried to reach the network: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield


def test_the_pinned_kubernetes_version_is_bundled_with_the_validator() -> None:
    assert any(version.startswith(f"{K8S_VERSION}.") for version in all_versions())


@pytest.mark.parametrize(("filename", "resource"), RESOURCES, ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in RESOURCES])
def test_manifest_validates_against_the_kubernetes_schema_offline(
    filename: str, resource: dict[str, Any], no_network: None
) -> None:
    try:
        validated = kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.path)
        pytest.fail(f"{filename} {resource['kind']}/{resource['metadata']['name']}: {path}: {error.message}")
    assert validated == K8S_VERSION
    assert resource["metadata"].get("namespace", NAMESPACE) == NAMESPACE or resource["kind"] == "Namespace"


def test_the_validator_rejects_a_misspelt_field(no_network: None) -> None:
    broken = yaml.safe_load(yaml.safe_dump(DEPLOYMENTS["chat"]))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = broken["spec"]["template"]["spec"][
        "containers"
    ][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest_and_only_existing_ones() -> None:
    listed = set(KUSTOMIZATION["resources"])
    assert listed == {p.name for p in MANIFEST_FILES} - OPTIONAL_MANIFESTS
    assert KUSTOMIZATION["namespace"] == NAMESPACE
    assert {doc["metadata"].get("namespace") for _, doc in RESOURCES if doc["kind"] != "Namespace"} == {NAMESPACE}


def test_images_are_the_four_cairn_images_at_the_project_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert set(DEPLOYMENTS) == set(SETTINGS)
    for name in SETTINGS:
        assert _container(name)["image"] == f"cairn-{name}:{version}"
    assert {image["name"]: image["newTag"] for image in KUSTOMIZATION["images"]} == {
        f"cairn-{name}": version for name in SETTINGS
    }


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_deployment_probes_hit_the_right_paths_on_the_container_port(name: str) -> None:
    container = _container(name)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": PORTS[name]}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert int(env[f"{name.upper()}_PORT"]) == PORTS[name]
    assert env[f"{name.upper()}_HOST"] == "0.0.0.0"

    def probe_port(probe: dict[str, Any]) -> int:
        port = probe["httpGet"]["port"]
        return ports[port] if isinstance(port, str) else port

    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probe_port(container["readinessProbe"]) == probe_port(container["livenessProbe"]) == PORTS[name]
    if name == "retrieval":  # the model loads before the port opens: the startup probe covers it
        startup = container["startupProbe"]
        assert startup["httpGet"]["path"] == "/healthz" and probe_port(startup) == PORTS[name]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_pod_runs_unprivileged_with_resources(name: str) -> None:
    pod = WORKLOADS[name]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    # Service links would inject CHAT_PORT=tcp://... and the like, clashing with Cairn's <NAME>_PORT settings.
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("privileged")
        assert not any("hostPort" in port for port in container["ports"])
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][kind]), f"{name} {kind}"
        assert container["readinessProbe"] and container["livenessProbe"]


def test_rabbitmq_keeps_its_erlang_cookie_private_across_pod_restarts() -> None:
    # The cookie is $HOME/.erlang.cookie, and HOME is the data volume. With the default fsGroupChangePolicy
    # (Always) the kubelet adds group read and write to every file of the volume at each mount, and Erlang
    # then refuses the cookie ("must be accessible by owner only"): the broker crash-loops from its first
    # rescheduling on. OnRootMismatch walks the volume only while its root does not match the fsGroup yet,
    # that is on the first mount, before the cookie exists.
    pod = STATEFULSETS["rabbitmq"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (data,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/var/lib/rabbitmq"]
    assert data["name"] in {claim["metadata"]["name"] for claim in STATEFULSETS["rabbitmq"]["spec"]["volumeClaimTemplates"]}
    assert "fsGroup" in pod["securityContext"]
    assert pod["securityContext"].get("fsGroupChangePolicy") == "OnRootMismatch"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_cairn_pods_run_as_the_image_user_on_a_read_only_root_with_writable_data(name: str) -> None:
    pod = DEPLOYMENTS[name]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == NON_ROOT_UID
    container = _container(name)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert CONFIG["CAIRN_DATA_DIR"] in mounts and "/tmp" in mounts
    assert "emptyDir" in volumes[mounts[CONFIG["CAIRN_DATA_DIR"]]]
    dockerfile = (ROOT / "services" / name / "Dockerfile").read_text()
    assert f"--uid {NON_ROOT_UID}" in dockerfile


def test_memory_is_sized_for_torch_only_in_retrieval() -> None:
    def mebibytes(quantity: str) -> float:
        units = {"Mi": 1, "Gi": 1024}
        return float(quantity[:-2]) * units[quantity[-2:]]

    limits = {name: mebibytes(_container(name)["resources"]["limits"]["memory"]) for name in SETTINGS}
    requests = {name: mebibytes(_container(name)["resources"]["requests"]["memory"]) for name in SETTINGS}
    # Measured: retrieval ~0.9 GiB steady and 1.0 GiB peak with the model loaded; the others 85-140 MiB.
    assert requests["retrieval"] >= 1024 and limits["retrieval"] >= 1536
    for name in SETTINGS.keys() - {"retrieval"}:
        assert 150 <= requests[name] <= limits[name] <= 512, name


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_selects_the_pods_of_its_workload_on_a_named_port(name: str) -> None:
    service = SERVICES[name]
    workload = WORKLOADS[name]
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert workload["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container_ports = {
        port["name"]: port["containerPort"] for c in workload["spec"]["template"]["spec"]["containers"] for port in c["ports"]
    }
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in container_ports
        assert port["port"] == container_ports[port["targetPort"]]
    if name in STATEFULSETS:
        assert workload["spec"]["serviceName"] == name and service["spec"]["clusterIP"] == "None"


def test_only_chat_and_retrieval_are_autoscaled_on_cpu_and_own_their_replica_count() -> None:
    autoscalers = _of_kind("HorizontalPodAutoscaler")
    targets = {hpa["spec"]["scaleTargetRef"]["name"]: hpa for hpa in autoscalers.values()}
    assert set(targets) == AUTOSCALED
    for name, hpa in targets.items():
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment" and name in DEPLOYMENTS
        assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
        (metric,) = hpa["spec"]["metrics"]
        assert metric["resource"]["name"] == "cpu"
        assert "cpu" in _container(name)["resources"]["requests"]  # utilisation is measured against it
        assert "replicas" not in DEPLOYMENTS[name]["spec"]  # else every `kubectl apply` resets the autoscaler


def test_disruption_budgets_select_existing_pods() -> None:
    for budget in _of_kind("PodDisruptionBudget").values():
        selector = budget["spec"]["selector"]["matchLabels"]
        matching = [
            n for n, w in WORKLOADS.items() if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matching == [budget["metadata"]["name"]]


def _secret_refs(container: dict[str, Any]) -> dict[str, str]:
    return {
        item["name"]: item["valueFrom"]["secretKeyRef"]["key"]
        for item in container.get("env", [])
        if "secretKeyRef" in item.get("valueFrom", {})
    }


def test_every_referenced_config_map_secret_and_key_exists() -> None:
    config_maps, secrets = _of_kind("ConfigMap"), _of_kind("Secret")
    for name, workload in WORKLOADS.items():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps, name
            for item in container.get("env", []):
                ref = item.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    assert ref["secretKeyRef"]["key"] in secrets[ref["secretKeyRef"]["name"]]["stringData"], name
                    assert not ref["secretKeyRef"].get("optional"), name
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["key"] in config_maps[ref["configMapKeyRef"]["name"]]["data"], name


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_variable_a_cairn_container_gets_is_a_setting_it_reads(name: str) -> None:
    reads = _env_names(SETTINGS[name])
    container = _container(name)
    given = {item["name"] for item in container["env"]} - LIBRARY_ENV
    assert given <= reads, f"{name} is given settings it does not read: {given - reads}"
    assert container["envFrom"] == [{"configMapRef": {"name": "cairn-config"}}]
    # Secrets go in only where needed, always from the Secret, never as a literal value.
    for item in container["env"]:
        assert item["name"] not in SECRET or "valueFrom" in item, item["name"]
    assert _secret_refs(container)["CAIRN_SERVICE_TOKEN"] == "CAIRN_SERVICE_TOKEN"


def test_every_config_map_key_is_read_by_some_service() -> None:
    read_somewhere = set().union(*(_env_names(settings) for settings in SETTINGS.values()))
    assert set(CONFIG) - TRACING_ENV - read_somewhere == set()
    assert all(isinstance(value, str) for value in CONFIG.values())  # ConfigMap data must be strings


@pytest.mark.parametrize(
    ("service", "needs"),
    [
        ("gateway", {"REDIS_URL", "AMQP_URL"}),
        ("chat", {"REDIS_URL", "AMQP_URL", "LLM_API_KEY"}),
        ("retrieval", {"LLM_API_KEY"}),
        ("analytics", {"AMQP_URL", "ANALYTICS_DB_PASSWORD"}),
    ],
)
def test_each_service_gets_the_secrets_it_needs(service: str, needs: set[str]) -> None:
    assert set(_secret_refs(_container(service))) == needs | {"CAIRN_SERVICE_TOKEN"}


def test_the_placeholder_secret_fails_closed_and_the_passwords_agree() -> None:
    # Deployed unchanged, the services refuse to start: production refuses the placeholder service token.
    assert CONFIG["CAIRN_ENV"] == "production"
    assert SECRET["CAIRN_SERVICE_TOKEN"] == PLACEHOLDER_SERVICE_TOKEN
    assert urlparse(SECRET["REDIS_URL"]).password == SECRET["REDIS_PASSWORD"]
    assert urlparse(SECRET["AMQP_URL"]).password == SECRET["RABBITMQ_PASSWORD"]
    assert _secret_refs(_container("analytics"))["ANALYTICS_DB_PASSWORD"] == "POSTGRES_PASSWORD"
    assert all("REPLACE" in SECRET[key] for key in ("REDIS_PASSWORD", "RABBITMQ_PASSWORD", "POSTGRES_PASSWORD"))


def _environment(container: dict[str, Any], secret: dict[str, str]) -> dict[str, str]:
    """The variables the container gets from the ConfigMap and from `secret`, as the kubelet sets them."""
    environment = dict(CONFIG)
    for item in container["env"]:
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        environment[item["name"]] = secret[ref["key"]] if ref else item["value"]
    return environment


def test_analytics_reaches_postgres_with_any_password_set_in_one_place() -> None:
    # The operator replaces POSTGRES_PASSWORD only, with a strong password full of URL characters; the
    # PostgreSQL StatefulSet and analytics both read that one key, and analytics needs no escaping.
    password = "p@ss:w/rd#x%2F?y=1&z $dollar"
    replaced = {"POSTGRES_PASSWORD": password, "CAIRN_SERVICE_TOKEN": "a-real-service-token"}
    environment = _environment(_container("analytics"), SECRET | replaced)
    url = make_url(AnalyticsSettings(**environment).database_url)
    assert (url.username, url.host, url.port, url.database) == ("cairn", "postgres", 5432, "analytics")
    assert url.password == password
    (postgres,) = STATEFULSETS["postgres"]["spec"]["template"]["spec"]["containers"]
    assert _secret_refs(postgres)["POSTGRES_PASSWORD"] == "POSTGRES_PASSWORD"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_cairn_container_starts_with_the_values_its_manifests_give(name: str, tmp_path: Path) -> None:
    # The name checks above pass a known variable with a value the service refuses (QUERY_REFORMULATION:
    # follow-ups, a port that is no number): every pod of that service would then exit at start-up. The
    # operator replaces the placeholder token; /data is the pod's writable emptyDir, here a folder of the test.
    replaced = {"CAIRN_SERVICE_TOKEN": "a-real-service-token"}
    environment = _environment(_container(name), SECRET | replaced) | {"CAIRN_DATA_DIR": str(tmp_path)}
    SETTINGS[name](**environment)


def test_tracing_is_off_until_the_config_map_names_an_endpoint() -> None:
    assert CONFIG["OTEL_EXPORTER_OTLP_ENDPOINT"] == ""
    assert not otlp_endpoint_configured(CONFIG)
    assert otlp_endpoint_configured(CONFIG | {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4318"})


def test_every_url_setting_points_at_a_service_and_its_port() -> None:
    urls = {key: value for key, value in {**CONFIG, **SECRET}.items() if "://" in value}
    assert {"CHAT_URLS", "RETRIEVAL_URLS", "ANALYTICS_URL", "CHROMA_URL", "REDIS_URL", "AMQP_URL", "ANALYTICS_DB_URL"} <= set(urls)
    for key, value in urls.items():
        for url in value.split(","):
            parsed = urlparse(url.strip())
            assert parsed.hostname in SERVICES, f"{key}: no Service {parsed.hostname!r}"
            assert parsed.port in {port["port"] for port in SERVICES[parsed.hostname]["spec"]["ports"]}, key
    assert CONFIG["CHAT_URLS"] == f"http://chat:{PORTS['chat']}"
    assert CONFIG["RETRIEVAL_URLS"] == f"http://retrieval:{PORTS['retrieval']}"


def test_only_the_gateway_is_reachable_from_outside() -> None:
    for name, service in SERVICES.items():
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP", name
        assert not service["spec"].get("externalIPs"), name
    (ingress,) = [doc for file, doc in RESOURCES if doc["kind"] == "Ingress"]
    backends = {
        path["backend"]["service"]["name"] for rule in ingress["spec"]["rules"] for path in rule["http"]["paths"]
    }
    assert backends == {"gateway"}
    policies = _of_kind("NetworkPolicy").values()
    everyone = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert len(everyone) == 1 and everyone[0]["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    opened = [p for p in policies if any("from" not in rule for rule in p["spec"].get("ingress", []))]
    assert [p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in opened] == ["gateway"]
    assert opened[0]["spec"]["ingress"][0]["ports"] == [{"port": PORTS["gateway"], "protocol": "TCP"}]


def _routed_by(ingress: dict, url_path: str) -> bool:
    """Whether a request for `url_path` reaches a backend, by Kubernetes' Exact and Prefix matching
    (Prefix matches whole path elements: /api matches /api and /api/chat, not /apis)."""
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            p, kind = path["path"], path["pathType"]
            if url_path == p or (kind == "Prefix" and url_path.startswith(p.rstrip("/") + "/")):
                return True
    return False


def test_the_ingress_publishes_the_gateways_routes_but_not_its_metrics() -> None:
    from services.gateway.main import create_app

    (ingress,) = [doc for file, doc in RESOURCES if doc["kind"] == "Ingress"]
    internal = {"/metrics", "/readyz"}  # /metrics names internal addresses; both are for Prometheus and probes
    routes = {re.sub(r"{[^}]+}", "x", route.path) for route in app_routes(create_app())}
    assert internal <= routes and {"/", "/dashboard", "/auth/login", "/api/chat", "/v1/chat/completions"} <= routes
    assert sorted(r for r in routes - internal if not _routed_by(ingress, r)) == []
    assert not any(_routed_by(ingress, r) for r in internal)


def test_chroma_is_the_same_image_as_in_compose() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    (container,) = STATEFULSETS["chroma"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == compose["services"]["chroma"]["image"]
    for engine in ("redis", "rabbitmq", "postgres"):
        (container,) = STATEFULSETS[engine]["spec"]["template"]["spec"]["containers"]
        assert container["image"] == compose["services"][engine]["image"], engine


OUTBOX_DRAIN_S = 5.0  # what chat and the gateway give waiting events at shutdown (EventPublisher.close)


@pytest.mark.parametrize("name", ["gateway", "chat"])
def test_a_stopping_pod_finishes_the_question_it_is_answering(name: str) -> None:
    # A rollout, a scale-down or a node drain stops the pod: after its preStop pause it finishes what it serves,
    # which the gateway waits for up to UPSTREAM_TIMEOUT_S; killed at the grace period, the answer is cut.
    spec = DEPLOYMENTS[name]["spec"]["template"]["spec"]
    pause_s = float(_container(name)["lifecycle"]["preStop"]["exec"]["command"][-1])
    answer_s = GatewaySettings(upstream_timeout_s=CONFIG.get("UPSTREAM_TIMEOUT_S", 120.0)).upstream_timeout_s
    assert spec["terminationGracePeriodSeconds"] >= pause_s + answer_s + OUTBOX_DRAIN_S
