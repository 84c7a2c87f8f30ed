"""`cairn ask` and Ctrl-C against stand-ins: what the operator reads when the answer is not Cairn's."""
import getpass

import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, PlainTextResponse

from cairn import cli
from tests.support import serve_in_thread

pytestmark = pytest.mark.unit

PROXY_PAGE = "<html><body><h1>502 Bad Gateway</h1>\n<hr>nginx</body></html>"


def _gateway(*, login_ok: bool) -> FastAPI:
    """A stand-in for what sits at GATEWAY_URL: a proxy's error page, or a gateway whose chat fails as text."""
    app = FastAPI()

    @app.post("/auth/login")
    async def login():
        return {"token": "t"} if login_ok else HTMLResponse(PROXY_PAGE, status_code=502)

    @app.post("/api/chat")
    async def chat():
        return PlainTextResponse("Internal Server Error", status_code=500)

    @app.post("/auth/logout")
    async def logout():
        return {}

    return app


@pytest.mark.parametrize(
    ("login_ok", "expected"),
    [(False, "login failed: HTTP 502: <html><body><h1>502 Bad Gateway</h1> <hr>nginx</body></html>\n"),
     (True, "error 500: HTTP 500: Internal Server Error\n")],
    ids=["login", "chat"],
)
def test_an_answer_that_is_not_cairns_is_one_line_not_a_traceback(login_ok, expected, monkeypatch, capsys):
    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    with serve_in_thread(_gateway(login_ok=login_ok)) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "anything"]) == 1
    assert capsys.readouterr().err == expected


def test_ctrl_c_at_a_prompt_ends_with_130_and_no_traceback(monkeypatch, capsys):
    def pressed_ctrl_c(prompt: str = "") -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(getpass, "getpass", pressed_ctrl_c)
    assert cli.main(["ask", "anything", "--user", "dave"]) == 130
    assert capsys.readouterr().err == "\ninterrupted\n"
