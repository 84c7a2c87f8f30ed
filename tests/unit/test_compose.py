"""docker-compose.yml and the Dockerfiles: Compose 1.29 accepts the file offline, only the gateway
is published, everything has a health check, and only retrieval's image carries torch."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CAIRN_SERVICES = ("gateway", "chat", "retrieval", "analytics")
PORTS = {"gateway": 8000, "chat": 8001, "retrieval": 8002, "analytics": 8003}


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


def test_compose_config_passes_and_has_every_service(rendered: dict[str, Any]) -> None:
    assert set(rendered["services"]) == {"redis", "rabbitmq", "chroma", "postgres", *CAIRN_SERVICES}


def test_compose_refuses_to_render_without_a_service_token(tmp_path: Path) -> None:
    result = _config(tmp_path)
    assert result.returncode != 0
    assert "CAIRN_SERVICE_TOKEN" in result.stderr


def test_only_the_gateway_publishes_a_port(rendered: dict[str, Any]) -> None:
    published = {name for name, svc in rendered["services"].items() if svc.get("ports")}
    assert published == {"gateway"}
    (port,) = rendered["services"]["gateway"]["ports"]
    target = port["target"] if isinstance(port, dict) else int(str(port).rsplit(":", 1)[-1])
    assert int(target) == PORTS["gateway"]


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


def test_services_are_wired_to_the_shared_engines(rendered: dict[str, Any]) -> None:
    env = {name: rendered["services"][name]["environment"] for name in CAIRN_SERVICES}
    assert env["gateway"]["REDIS_URL"] == "redis://redis:6379/0"
    assert env["gateway"]["CHAT_URL"] == "http://chat:8001"
    assert env["gateway"]["ANALYTICS_URL"] == "http://analytics:8003"
    assert env["chat"]["RETRIEVAL_URL"] == "http://retrieval:8002"
    assert env["chat"]["AMQP_URL"] == env["analytics"]["AMQP_URL"] == "amqp://guest:guest@rabbitmq:5672/"
    assert env["retrieval"]["CHROMA_URL"] == "http://chroma:8000"
    assert env["analytics"]["ANALYTICS_DB_URL"].startswith("postgresql+psycopg://")
    assert rendered["services"]["postgres"]["environment"]["POSTGRES_DB"] == "analytics"
    tokens = {e["CAIRN_SERVICE_TOKEN"] for e in env.values()}
    assert tokens == {"compose-test-token"}
    assert {e["CAIRN_ENV"] for e in env.values()} == {"production"}


def test_each_dockerfile_named_exists(rendered: dict[str, Any]) -> None:
    for name in CAIRN_SERVICES:
        build = rendered["services"][name]["build"]
        assert Path(build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]).is_file(), build["dockerfile"]


def _installed_extras(dockerfile: str) -> list[str]:
    match = re.search(r'pip install "\.\[([a-z,]+)\]"', dockerfile)
    assert match, "the builder stage must pip install the project with its dependency group"
    return match.group(1).split(",")


@pytest.mark.parametrize("name", CAIRN_SERVICES)
def test_dockerfile_installs_its_group_runs_unprivileged_and_checks_health(name: str) -> None:
    dockerfile = (ROOT / "services" / name / "Dockerfile").read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installed = _installed_extras(dockerfile)
    assert name in installed
    requirements = [req for extra in installed for req in extras[extra]]
    carries_torch = any(req.startswith("torch") for req in requirements) or "torch" in dockerfile
    assert carries_torch == (name == "retrieval")
    if name == "retrieval":
        assert "download.pytorch.org/whl/cpu" in dockerfile
    assert re.search(r"^USER (?!root)\S+", dockerfile, re.MULTILINE)
    assert f"EXPOSE {PORTS[name]}" in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert f'CMD ["python", "-m", "services.{name}"]' in dockerfile
    copied = re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.MULTILINE)
    other_services = [s for s in CAIRN_SERVICES if s != name]
    assert not [c for c in copied if any(c.startswith(f"services/{o}") for o in other_services)]
