"""`cairn ask` and Ctrl-C against stand-ins: what the operator reads when the answer is not Cairn's."""
import asyncio
import email.utils
import getpass
import re
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

from cairn import cli, commands
from services.chat.models import ChatRequest
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


def test_an_address_that_is_not_the_gateways_says_which_setting_to_check(monkeypatch, capsys):
    # Another service, or a wrong port: its "Not Found" alone left the operator guessing.
    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    with serve_in_thread(FastAPI()) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "anything"]) == 1
    assert capsys.readouterr().err == (
        f"login failed: no Cairn gateway at {url}: POST /auth/login answered 404: is GATEWAY_URL right?\n"
    )


def _refusing_gateway(*, at: str, status: int, message: str, retry_after: str | None) -> FastAPI:
    """A gateway that refuses the log-in or the question (`at`) with Cairn's JSON error and a Retry-After."""
    app = FastAPI()
    headers = {"Retry-After": retry_after} if retry_after is not None else None
    refusal = JSONResponse({"error": "refused", "message": message}, status_code=status, headers=headers)

    @app.post("/auth/login")
    async def login():
        return refusal if at == "login" else {"token": "t"}

    @app.post("/api/chat")
    async def chat():
        return refusal

    @app.post("/auth/logout")
    async def logout():
        return {}

    return app


@pytest.mark.parametrize(
    ("at", "status", "message", "retry_after", "expected"),
    [("chat", 503, "retrieval is unavailable", "5",
      r"error 503: retrieval is unavailable \(try again in 5 seconds\)\n"),
     ("chat", 503, "retrieval is unavailable", "1", r"error 503: retrieval is unavailable \(try again in 1 second\)\n"),
     ("chat", 429, "at most 2 questions per 60 s; try again later", "in-two-minutes",
      r"error 429: at most 2 questions per 60 s; try again later \(try again in 1([01]\d|20) seconds\)\n"),  # 120 s, less the time a busy machine took
     ("login", 429, "too many failed logins; try again later", "42",
      r"login failed: too many failed logins; try again later \(try again in 42 seconds\)\n"),
     ("chat", 503, "retrieval is unavailable", None, r"error 503: retrieval is unavailable\n"),
     ("chat", 503, "retrieval is unavailable", "soon", r"error 503: retrieval is unavailable\n")],
    ids=["503-seconds", "503-one-second", "429-http-date", "login-429", "no-header", "unreadable-header"],
)
def test_a_refusal_with_retry_after_says_when_to_try_again(
    at, status, message, retry_after, expected, monkeypatch, capsys
):
    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    if retry_after == "in-two-minutes":
        retry_after = email.utils.formatdate(time.time() + 120, usegmt=True)
    with serve_in_thread(_refusing_gateway(at=at, status=status, message=message, retry_after=retry_after)) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "anything"]) == 1
    assert re.fullmatch(expected, capsys.readouterr().err)


def test_ctrl_c_at_a_prompt_ends_with_130_and_no_traceback(monkeypatch, capsys):
    def pressed_ctrl_c(prompt: str = "") -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(getpass, "getpass", pressed_ctrl_c)
    assert cli.main(["ask", "anything", "--user", "dave"]) == 130
    assert capsys.readouterr().err == "\ninterrupted\n"


def _recording_gateway(bodies: list[dict]) -> FastAPI:
    """A gateway that logs anyone in and answers every question, keeping each question's JSON body."""
    app = FastAPI()

    @app.post("/auth/login")
    async def login():
        return {"token": "t"}

    @app.post("/api/chat")
    async def chat(request: Request):
        bodies.append(await request.json())
        return {"answer": "Three roles.", "citations": []}

    @app.post("/auth/logout")
    async def logout():
        return {}

    return app


@pytest.mark.parametrize(("options", "sent_top_k"), [([], None), (["--top-k", "3"], 3)], ids=["default", "given"])
def test_top_k_is_sent_only_when_given_so_the_services_default_top_k_applies(
    options, sent_top_k, monkeypatch, capsys
):
    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    bodies: list[dict] = []
    with serve_in_thread(_recording_gateway(bodies)) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "What roles are there?", *options]) == 0
    assert [body.get("top_k") for body in bodies] == [sent_top_k]
    assert capsys.readouterr().out.startswith("Three roles.")


def test_the_top_k_range_is_the_chat_requests():
    schema = ChatRequest.model_json_schema()["properties"]["top_k"]["anyOf"][0]
    assert (schema["minimum"], schema["maximum"]) == (1, cli.MAX_TOP_K)


def _slow_gateway(answer_after_s: float) -> FastAPI:
    """A gateway whose log-in is quick and whose answer takes `answer_after_s`, as with a slow model."""
    app = FastAPI()

    @app.post("/auth/login")
    async def login():
        return {"token": "t"}

    @app.post("/api/chat")
    async def chat():
        await asyncio.sleep(answer_after_s)
        return {"answer": "Three roles.", "citations": []}

    @app.post("/auth/logout")
    async def logout():
        return {}

    return app


def test_the_answer_is_awaited_as_long_as_the_gateway_takes_to_give_it(monkeypatch, capsys):
    # The command gave up after 120 s, saying it could not reach Cairn, though the gateway waits as long as its
    # UPSTREAM_TIMEOUT_S, raised for a slow model, and answers 504 itself when that passes.
    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    monkeypatch.setattr(commands, "REQUEST_TIMEOUT_S", 0.5)
    with serve_in_thread(_slow_gateway(answer_after_s=1.5)) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "What roles are there?"]) == 0
    assert capsys.readouterr().out.startswith("Three roles.")


def test_a_gateway_that_takes_the_login_but_never_answers_it_is_said_so(monkeypatch, capsys):
    app = FastAPI()

    @app.post("/auth/login")
    async def login():
        await asyncio.sleep(3)

    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    monkeypatch.setattr(commands, "REQUEST_TIMEOUT_S", 0.5)
    with serve_in_thread(app) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "anything"]) == 1
    assert capsys.readouterr().err == f"no answer from Cairn at {url} within 0.5 s\n"


def test_a_question_cut_off_mid_answer_still_logs_out(monkeypatch, capsys):
    # The session would otherwise stay among the user's sessions for a day, its token gone with the command.
    logged_out = []

    async def gateway(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/auth/login":
            json_type = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": json_type})
            await send({"type": "http.response.body", "body": b'{"token": "t"}'})
        elif scope["path"] == "/api/chat":  # the answer begins, then the connection is dropped
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]})
            await send({"type": "http.response.body", "body": b'{"answer": ', "more_body": True})
            raise RuntimeError("the gateway stopped")
        else:  # /auth/logout, and the /healthz that serve_in_thread waits for
            if scope["path"] == "/auth/logout":
                logged_out.append(scope["path"])
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    monkeypatch.setenv("CAIRN_PASSWORD", "whatever1")
    with serve_in_thread(gateway) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "anything"]) == 1
    assert logged_out == ["/auth/logout"]
    assert capsys.readouterr().err.startswith(f"cannot reach Cairn at {url}: ")


@pytest.mark.parametrize("given", ["CAIRN_PASSWORD", "CAIRN_DEMO_PASSWORD"])
def test_a_refused_kept_demo_password_says_how_to_give_the_new_one(given, monkeypatch, capsys):
    # The demo user's password changed (POST /auth/password, cairn user reset-password): the one cairn up
    # keeps no longer logs in, and "invalid username or password" alone left the user guessing which.
    app = FastAPI()

    @app.post("/auth/login")
    async def login():
        return JSONResponse({"error": "unauthorized", "message": "invalid username or password"}, status_code=401)

    monkeypatch.delenv("CAIRN_PASSWORD", raising=False)
    monkeypatch.setenv(given, "whatever1")
    with serve_in_thread(app) as url:
        monkeypatch.setenv("GATEWAY_URL", url)
        assert cli.main(["ask", "anything"]) == 1
    hint = (" (the demo password known to cairn up was refused: if it has changed, give the current one with"
            " CAIRN_PASSWORD or --password-stdin)")
    expected = "login failed: invalid username or password" + (hint if given == "CAIRN_DEMO_PASSWORD" else "")
    assert capsys.readouterr().err == expected + "\n"
