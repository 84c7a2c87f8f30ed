"""docker-compose.yml and the Dockerfiles: Compose 1.29 accepts the file offline, only the gateway
is published, everything has a health check, `--scale` works (no fixed names, host ports or shared
data on the scaled services, a private outbox per replica), every setting given is one the service
reads, and only retrieval's image carries torch — proven on the dependency closure of each image's
extras, resolved offline from the installed distributions' metadata."""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic_settings import BaseSettings
from sqlalchemy.engine import make_url

from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.settings import Settings as ChatSettings
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.settings import Settings as RetrievalSettings
from shared.tracing import otlp_endpoint_configured

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CAIRN_SERVICES = ("gateway", "chat", "retrieval", "analytics")
ENGINES = ("redis", "rabbitmq", "chroma", "postgres")
OBSERVABILITY = ("prometheus", "grafana")
PORTS = {"gateway": 8000, "chat": 8001, "retrieval": 8002, "analytics": 8003}
SCALED = ("chat", "retrieval", "analytics")
OUTBOX_WRITERS = ("gateway", "chat")
SETTINGS: dict[str, type[BaseSettings]] = {
    "gateway": GatewaySettings, "chat": ChatSettings, "retrieval": RetrievalSettings, "analytics": AnalyticsSettings,
}
# The OpenTelemetry SDK's own variables, read by shared/tracing.py and the OTLP exporter it makes.
TRACING_ENV = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces",
    "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=abc,x-team=cairn",
    "OTEL_EXPORTER_OTLP_TIMEOUT": "5",
    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
    "OTEL_TRACES_SAMPLER_ARG": "0.25",
    "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging",
}
LIBRARY_ENV = {"HF_HUB_OFFLINE", *TRACING_ENV}  # read by huggingface_hub and OpenTelemetry, not by Cairn's settings
# A strong password with every character that means something in a URL.
AWKWARD_PASSWORD = "p@ss:w/rd#x%2F?y=1&z $dollar"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The machine-learning stack only retrieval may carry (and, with it, any CUDA runtime).
HEAVY = {"torch", "sentence-transformers", "transformers", "onnxruntime", "chromadb", "scipy"}


def _docker_compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail(
            "docker-compose is not installed; it validates docker-compose.yml offline. "
            "Install it with: sudo apt-get install -y docker-compose",
            pytrace=False,
        )
    return binary


def _config(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    empty_env_file = tmp_path / "empty.env"  # keep a developer's .env out of the check
    empty_env_file.write_text("")
    environ = {k: v for k, v in os.environ.items() if k != "CAIRN_SERVICE_TOKEN"} | env
    return subprocess.run(
        [_docker_compose(), "--env-file", str(empty_env_file), "-f", "docker-compose.yml", "config"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result = _config(tmp_path_factory.mktemp("compose"), CAIRN_SERVICE_TOKEN="compose-test-token")
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    return yaml.safe_load(result.stdout)


def _default_services(rendered: dict[str, Any]) -> dict[str, Any]:
    """The services `docker compose up` starts without a --profile."""
    return {name: svc for name, svc in rendered["services"].items() if not svc.get("profiles")}


def _environment(svc: dict[str, Any]) -> dict[str, str]:
    """The variables a container gets: `config` escapes a literal $ as $$, and a pass-through variable
    that is unset in the shell renders as null and is left out of the container."""
    return {name: value.replace("$$", "$") for name, value in svc["environment"].items() if value is not None}


def _published(port: Any) -> tuple[str, int | None, int]:
    """(host address, host port, container port) of a rendered `ports` entry, short or long form."""
    if isinstance(port, dict):
        published = port.get("published")
        return port.get("host_ip", ""), int(published) if published else None, int(port["target"])
    parts = str(port).split("/")[0].split(":")
    host_ip = parts[0] if len(parts) == 3 else ""
    published = int(parts[-2]) if len(parts) >= 2 and parts[-2] else None
    return host_ip, published, int(parts[-1])


def _mounts(svc: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(source, target) of each rendered volume; source None for an anonymous volume."""
    mounts = []
    for volume in svc.get("volumes", []):
        if isinstance(volume, dict):
            mounts.append((volume.get("source"), volume["target"]))
        else:
            parts = str(volume).split(":")
            mounts.append((parts[0], parts[1]) if len(parts) > 1 else (None, parts[0]))
    return mounts


def _env_names(settings: type[BaseSettings]) -> set[str]:
    names = set()
    for name, field in settings.model_fields.items():
        alias = field.validation_alias
        names |= {str(choice).upper() for choice in getattr(alias, "choices", [alias] if alias else [name])}
    return names


def test_compose_config_passes_and_has_every_service(rendered: dict[str, Any]) -> None:
    assert set(_default_services(rendered)) == {*ENGINES, *CAIRN_SERVICES}
    assert set(rendered["services"]) == {*ENGINES, *CAIRN_SERVICES, *OBSERVABILITY}


def test_compose_refuses_to_render_without_a_service_token(tmp_path: Path) -> None:
    result = _config(tmp_path)
    assert result.returncode != 0
    assert "CAIRN_SERVICE_TOKEN" in result.stderr


def test_only_the_gateway_publishes_a_port(rendered: dict[str, Any]) -> None:
    published = {name for name, svc in _default_services(rendered).items() if svc.get("ports")}
    assert published == {"gateway"}
    (port,) = rendered["services"]["gateway"]["ports"]
    assert _published(port)[2] == PORTS["gateway"]


def test_the_gateway_can_be_published_on_the_loopback_only(tmp_path: Path) -> None:
    # The default publishes on every interface (it is the public port); docs/operations.md shows this.
    result = _config(tmp_path, CAIRN_SERVICE_TOKEN="t", GATEWAY_PUBLISH="127.0.0.1:8080")
    assert result.returncode == 0, result.stderr
    (port,) = yaml.safe_load(result.stdout)["services"]["gateway"]["ports"]
    assert _published(port) == ("127.0.0.1", 8080, PORTS["gateway"])


def test_every_service_has_a_healthcheck(rendered: dict[str, Any]) -> None:
    missing = [name for name, svc in rendered["services"].items() if not svc.get("healthcheck", {}).get("test")]
    assert missing == []


def test_cairn_services_wait_for_healthy_dependencies_and_probe_their_own_port(rendered: dict[str, Any]) -> None:
    for name in CAIRN_SERVICES:
        svc = rendered["services"][name]
        conditions = {dep: spec.get("condition") for dep, spec in svc["depends_on"].items()}
        assert conditions and set(conditions.values()) == {"service_healthy"}, name
        probe = " ".join(svc["healthcheck"]["test"])
        assert f":{PORTS[name]}/healthz" in probe, name
        assert svc["environment"][f"{name.upper()}_HOST"] == "0.0.0.0"
        assert int(svc["environment"][f"{name.upper()}_PORT"]) == PORTS[name]


def test_scalable_services_have_no_fixed_container_name(rendered: dict[str, Any]) -> None:
    named = [name for name, svc in rendered["services"].items() if "container_name" in svc]
    assert named == []


@pytest.mark.parametrize("name", SCALED)
def test_scaled_services_have_no_fixed_identity_host_port_or_shared_volume(rendered: dict[str, Any], name: str) -> None:
    # `--scale` starts several containers from one definition: each of these would make them collide
    # (one name, one host port) or share what must stay per replica (a named volume: one outbox file).
    svc = rendered["services"][name]
    assert not {"container_name", "hostname", "ports", "mac_address"} & set(svc)
    assert [source for source, _ in _mounts(svc) if source is not None] == []


@pytest.mark.parametrize("name", OUTBOX_WRITERS)
def test_outbox_writers_keep_their_data_in_a_private_anonymous_volume(rendered: dict[str, Any], name: str) -> None:
    svc = rendered["services"][name]
    data_dir = svc["environment"]["CAIRN_DATA_DIR"]
    # Anonymous: one per container, so every replica has its own outbox; Compose keeps it when it
    # recreates the container (a new image or setting), so waiting events survive that too.
    assert (None, data_dir) in _mounts(svc)
    assert "OUTBOX_PATH" not in svc["environment"]  # the default, CAIRN_DATA_DIR/outbox/<service>.sqlite3


def test_rabbitmq_finds_its_queues_again_after_compose_recreates_it(rendered: dict[str, Any]) -> None:
    # RabbitMQ keeps its queues and messages under mnesia/rabbit@<host name> on its volume. Without a fixed
    # host name a container gets its id as one, so a recreated broker (a new image, `docker compose down` and
    # `up`) starts as a new, empty node beside the old one's directory: the durable analytics queue and the
    # events waiting in it for analytics are gone.
    rabbitmq = rendered["services"]["rabbitmq"]
    assert ("rabbitmq-data", "/var/lib/rabbitmq") in _mounts(rabbitmq)
    assert rabbitmq.get("hostname") == "rabbitmq"
    assert "RABBITMQ_NODENAME" not in rabbitmq.get("environment", {})  # rabbit@<hostname>, the image's default


def test_services_are_wired_to_the_shared_engines(rendered: dict[str, Any]) -> None:
    env = {name: rendered["services"][name]["environment"] for name in CAIRN_SERVICES}
    assert env["gateway"]["REDIS_URL"] == "redis://redis:6379/0"
    # One Compose service name per upstream: Compose's DNS answers it with every replica's address.
    assert env["gateway"]["CHAT_URLS"] == "http://chat:8001"
    assert env["gateway"]["RETRIEVAL_URLS"] == env["chat"]["RETRIEVAL_URLS"] == "http://retrieval:8002"
    assert env["gateway"]["ANALYTICS_URL"] == "http://analytics:8003"
    assert env["chat"]["AMQP_URL"] == env["analytics"]["AMQP_URL"] == "amqp://guest:guest@rabbitmq:5672/"
    assert env["retrieval"]["CHROMA_URL"] == "http://chroma:8000"
    assert env["analytics"]["ANALYTICS_DB_URL"].startswith("postgresql+psycopg://")
    assert rendered["services"]["postgres"]["environment"]["POSTGRES_DB"] == "analytics"
    tokens = {e["CAIRN_SERVICE_TOKEN"] for e in env.values()}
    assert tokens == {"compose-test-token"}
    assert {e["CAIRN_ENV"] for e in env.values()} == {"production"}


def test_analytics_reaches_postgres_with_a_password_full_of_url_characters(tmp_path: Path) -> None:
    result = _config(tmp_path, CAIRN_SERVICE_TOKEN="t", POSTGRES_PASSWORD=AWKWARD_PASSWORD)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert _environment(services["postgres"])["POSTGRES_PASSWORD"] == AWKWARD_PASSWORD
    settings = AnalyticsSettings(**_environment(services["analytics"]))
    url = make_url(settings.database_url)
    assert (url.drivername, url.username, url.host, url.port, url.database) == (
        "postgresql+psycopg", "cairn", "postgres", 5432, "analytics"
    )
    assert url.password == AWKWARD_PASSWORD


def test_tracing_settings_reach_every_cairn_service(tmp_path: Path, rendered: dict[str, Any]) -> None:
    for name in CAIRN_SERVICES:  # unset in the shell: not given at all, so nothing is exported
        assert not otlp_endpoint_configured(_environment(rendered["services"][name])), name
    result = _config(tmp_path, CAIRN_SERVICE_TOKEN="t", **TRACING_ENV)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    for name in CAIRN_SERVICES:
        environment = _environment(services[name])
        assert {key: environment.get(key) for key in TRACING_ENV} == TRACING_ENV, name
        assert otlp_endpoint_configured(environment)


def test_contextual_chunking_can_be_turned_on_from_the_shell(tmp_path: Path, rendered: dict[str, Any]) -> None:
    assert not RetrievalSettings(**_environment(rendered["services"]["retrieval"])).contextual_chunks
    model = {"LLM_BASE_URL": "http://llm.internal:8080/v1", "LLM_MODEL": "m", "LLM_API_KEY": "k"}
    result = _config(tmp_path, CAIRN_SERVICE_TOKEN="t", CONTEXTUAL_CHUNKS="true", **model)
    assert result.returncode == 0, result.stderr
    retrieval = RetrievalSettings(**_environment(yaml.safe_load(result.stdout)["services"]["retrieval"]))
    assert retrieval.contextual_chunks and (str(retrieval.llm_base_url), retrieval.llm_model) == (model["LLM_BASE_URL"], "m")


def test_the_chroma_client_is_pinned_to_the_chroma_servers_minor_release() -> None:
    # The HTTP client and the server change their API together from one minor release to the next.
    server = Version(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["chroma"]["image"].split(":")[1])
    (client,) = [Requirement(r) for r in PROJECT["optional-dependencies"]["retrieval"] if Requirement(r).name == "chromadb"]
    assert client.specifier.contains(server)
    assert not client.specifier.contains(f"{server.major}.{server.minor + 1}.0")
    if server.minor:
        assert not client.specifier.contains(f"{server.major}.{server.minor - 1}.0")
    assert client.specifier.contains(metadata.version("chromadb"))  # the client the tests ran against


@pytest.mark.parametrize("name", CAIRN_SERVICES)
def test_every_variable_a_service_gets_is_a_setting_it_reads(rendered: dict[str, Any], name: str) -> None:
    # The shared block (x-cairn-env) goes to every service, like the ConfigMap on Kubernetes: each of its
    # variables must be read by some service; a variable given to one service only, by that service.
    shared = set(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["x-cairn-env"]) - LIBRARY_ENV
    read_somewhere = set().union(*(_env_names(settings) for settings in SETTINGS.values()))
    assert shared - read_somewhere == set()
    own = set(rendered["services"][name]["environment"]) - shared - LIBRARY_ENV
    unread = own - _env_names(SETTINGS[name])
    assert unread == set(), f"{name} is given variables no setting reads (misspelt or renamed?): {unread}"


@pytest.mark.parametrize("name", CAIRN_SERVICES)
def test_every_service_starts_with_the_values_it_is_given(rendered: dict[str, Any], name: str, tmp_path: Path) -> None:
    # A known variable with a value the service refuses (QUERY_REFORMULATION=follow-ups, a default such as
    # ${RELEVANCE_THRESHOLD:-high}) passes the name check above, and the container would then exit at start-up.
    # /data is the image's folder of the `cairn` user, here a folder of the test.
    SETTINGS[name](**_environment(rendered["services"][name]) | {"CAIRN_DATA_DIR": str(tmp_path)})


def test_the_observability_profile_is_optional_and_local(rendered: dict[str, Any]) -> None:
    for name in OBSERVABILITY:
        svc = rendered["services"][name]
        assert svc["profiles"] == ["observability"]
        for port in svc["ports"]:
            assert _published(port)[0] == "127.0.0.1", f"{name} must publish on the loopback only"
        for source, _ in _mounts(svc):
            if source and source.startswith("/"):
                assert Path(source).exists(), source
    prometheus = dict((target, Path(source)) for source, target in _mounts(rendered["services"]["prometheus"]))
    assert (prometheus["/etc/prometheus"] / "prometheus.yml").is_file()
    grafana = {target: Path(source) for source, target in _mounts(rendered["services"]["grafana"]) if source}
    assert (grafana["/etc/grafana/dashboards"] / "cairn-dashboard.json").is_file()
    provisioning = grafana["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "cairn.yaml").read_text())["providers"]
    assert provider["options"]["path"] == "/etc/grafana/dashboards"


def test_prometheus_scrapes_every_replica_of_every_service(rendered: dict[str, Any]) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for name in CAIRN_SERVICES:
        # DNS discovery finds every container of a scaled service; a static target would reach only one.
        (discovery,) = jobs[name]["dns_sd_configs"]
        assert discovery["names"] == [name] and discovery["type"] == "A"
        assert discovery["port"] == PORTS[name]


def test_each_dockerfile_named_exists(rendered: dict[str, Any]) -> None:
    for name in CAIRN_SERVICES:
        build = rendered["services"][name]["build"]
        assert Path(build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]).is_file(), build["dockerfile"]


def _dockerfile(name: str) -> str:
    return (ROOT / "services" / name / "Dockerfile").read_text()


def _installed_extras(dockerfile: str) -> list[str]:
    match = re.search(r'pip install "\.\[([a-z,]+)\]"', dockerfile)
    assert match, "the builder stage must pip install the project with its dependency group"
    return match.group(1).split(",")


def _dependency_closure(extras: list[str]) -> dict[str, set[str]]:
    """Every distribution `pip install ".[extras]"` installs -> the extras it is asked for, walked offline
    through the requirement metadata of the distributions installed in this environment."""
    optional = PROJECT["optional-dependencies"]
    pending = [(Requirement(req), {""}) for req in [*PROJECT["dependencies"], *(r for e in extras for r in optional[e])]]
    wanted: dict[str, set[str]] = {}
    while pending:
        requirement, asked_extras = pending.pop()
        if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in asked_extras):
            continue  # another platform's or another extra's requirement
        name = canonicalize_name(requirement.name)
        extras_now = {"", *requirement.extras}
        if extras_now <= wanted.get(name, set()):
            continue
        wanted.setdefault(name, set()).update(extras_now)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is not installed, so the closure of {extras} cannot be walked: pip install -e '.[all]'")
        pending += [(Requirement(req), wanted[name]) for req in requires]
    return wanted


def _installed_mebibytes(names: set[str]) -> float:
    total = 0
    for name in names:
        dist = metadata.distribution(name)
        total += sum(dist.locate_file(f).stat().st_size for f in dist.files or [] if dist.locate_file(f).is_file())
    return total / 2**20


@pytest.mark.parametrize("name", CAIRN_SERVICES)
def test_only_the_retrieval_image_carries_torch_through_its_dependency_closure(name: str) -> None:
    closure = set(_dependency_closure(_installed_extras(_dockerfile(name))))
    assert "fastapi" in closure and "uvicorn" in closure  # the walk reached the shared dependencies
    cuda = {dist for dist in closure if dist.startswith("nvidia-")}
    if name == "retrieval":
        assert HEAVY <= closure
        assert cuda == set()  # the CPU build of torch, installed first from its own index
        assert "download.pytorch.org/whl/cpu" in _dockerfile(name)
    else:
        assert closure & HEAVY == set() and cuda == set(), f"{name} would carry {closure & (HEAVY | cuda)}"
        # Measured: gateway ~135 MiB, chat ~90 MiB, analytics ~165 MiB of packages; retrieval ~1.7 GiB.
        assert _installed_mebibytes(closure) < 300, name


@pytest.mark.parametrize("name", CAIRN_SERVICES)
def test_dockerfile_is_multi_stage_installs_its_group_runs_unprivileged_and_checks_health(name: str) -> None:
    dockerfile = _dockerfile(name)
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?", dockerfile, re.MULTILINE)
    assert stages == [("python:3.11-slim", "builder"), ("python:3.11-slim", "")]
    assert "COPY --from=builder /opt/venv /opt/venv" in dockerfile  # only the venv leaves the builder
    installed = _installed_extras(dockerfile)
    assert name in installed
    assert ("torch" in dockerfile) == (name == "retrieval")
    assert re.search(r"^USER (?!root)\S+", dockerfile, re.MULTILINE)
    assert f"EXPOSE {PORTS[name]}" in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert f'CMD ["python", "-m", "services.{name}"]' in dockerfile
    copied = re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.MULTILINE)
    other_services = [s for s in CAIRN_SERVICES if s != name]
    assert not [c for c in copied if any(c.startswith(f"services/{o}") for o in other_services)]


@pytest.mark.parametrize("name", CAIRN_SERVICES)
def test_dockerfile_labels_the_image_with_its_name_and_the_project_version(name: str) -> None:
    dockerfile = _dockerfile(name)
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', dockerfile))
    assert labels["org.opencontainers.image.title"] == f"cairn-{name}"
    assert labels["org.opencontainers.image.version"] == "${CAIRN_VERSION}"
    assert labels["org.opencontainers.image.description"]
    assert re.search(rf"^ARG CAIRN_VERSION={re.escape(PROJECT['version'])}$", dockerfile, re.MULTILINE)


def test_dockerignore_keeps_secrets_and_bulk_out_but_not_what_the_images_copy() -> None:
    patterns = [
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in (".git", ".venv", ".env", "data", "tests"):
        assert needed in patterns, needed

    def ignored(path: str) -> bool:
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(
            fnmatch.fnmatch(prefix, pattern.removeprefix("**/")) or fnmatch.fnmatch(prefix, pattern)
            for pattern in patterns
            if not pattern.startswith("!")
            for prefix in prefixes
        )

    for name in CAIRN_SERVICES:
        for source in re.findall(r"^COPY (?!--from)(.+) \S+$", _dockerfile(name), re.MULTILINE):
            for path in source.split():
                assert (ROOT / path).exists() and not ignored(path), f"{name} copies {path}"
