"""`cairn status` against stand-ins: what is at a service's address when it is not a Cairn service."""
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from cairn import commands
from cairn.settings import CliSettings
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.unit


def _answering(status: int, body) -> FastAPI:
    app = FastAPI()

    @app.get("/readyz")
    async def readyz():
        if isinstance(body, str):
            return HTMLResponse(body, status_code=status)
        return JSONResponse(body, status_code=status)

    return app


@pytest.mark.parametrize(
    ("status", "body"),
    [(200, [1, 2]), (200, {"checks": ["redis"]}), (404, {"detail": "Not Found"}), (502, "<h1>502 Bad Gateway</h1>")],
    ids=["json-list", "checks-list", "another-api", "proxy-page"],
)
def test_another_program_at_a_services_address_is_named_so_not_a_traceback(tmp_path, capsys, status, body):
    # A JSON list, or checks that are not an object, ended the command in an AttributeError.
    with serve_in_thread(_answering(status, body)) as url:
        cairn = CliSettings(data_dir=tmp_path, gateway_url=url, chat_port=free_port(), retrieval_port=free_port(),
                            analytics_port=free_port())
        assert commands.status(cairn) == 1
    gateway_line = capsys.readouterr().out.splitlines()[-1]
    assert gateway_line.split(maxsplit=2) == [
        "gateway", url, f"not a Cairn service: /readyz answered {status} without its checks"
    ]


def _cairn_service(service: str) -> FastAPI:
    app = FastAPI()

    @app.get("/readyz")
    async def readyz():
        return {"status": "ready", "checks": {"database": True, "broker": True}}

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "service": service}

    return app


def test_another_cairn_service_at_a_services_address_is_not_reported_as_that_service(tmp_path, capsys):
    # GATEWAY_URL with analytics' port: status called the analytics service a ready gateway and exited 0.
    with serve_in_thread(_cairn_service("analytics")) as url:
        cairn = CliSettings(data_dir=tmp_path, gateway_url=url, chat_port=free_port(), retrieval_port=free_port(),
                            analytics_port=free_port())
        assert commands.status(cairn) == 1
    gateway_line = capsys.readouterr().out.splitlines()[-1]
    assert gateway_line.split(maxsplit=2) == ["gateway", url, "not gateway: the analytics service answers here"]


def test_the_service_itself_at_its_address_is_reported_ready(tmp_path, capsys):
    with serve_in_thread(_cairn_service("gateway")) as url:
        cairn = CliSettings(data_dir=tmp_path, gateway_url=url, chat_port=free_port(), retrieval_port=free_port(),
                            analytics_port=free_port())
        commands.status(cairn)
    gateway_line = capsys.readouterr().out.splitlines()[-1]
    assert gateway_line.split(maxsplit=2) == ["gateway", url, "ready  database=ok, broker=ok"]
