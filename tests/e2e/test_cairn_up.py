"""The whole system as real processes, started the way a user starts it (`cairn up`):
gateway → chat → retrieval (real model, real Chroma) → offline generator through the OpenAI SDK
→ RabbitMQ → analytics (SQLite), on free loopback ports with a temporary data directory."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import openai
import pytest

from cairn.run_state import pid_alive
from tests.e2e.conftest import PASSWORD, REPO, cairn_env
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _login(client: httpx.Client) -> dict[str, str]:
    response = client.post("/auth/login", json={"username": "demo", "password": PASSWORD})
    assert response.status_code == 200, response.text
    assert set(response.json()["user"]["roles"]) == {"user", "analyst", "admin"}
    return {"Authorization": f"Bearer {response.json()['token']}"}


def test_up_prints_url_and_credentials(cairn):
    text = "".join(cairn.output)
    assert cairn.gateway in text and "user: demo" in text and f"password: {PASSWORD}" in text


def test_cited_answer_from_the_guide_and_both_events_counted(cairn):
    with httpx.Client(base_url=cairn.gateway, timeout=60) as client:
        auth = _login(client)
        before = client.get("/api/analytics/summary", headers=auth)
        assert before.status_code == 200, before.text + cairn.logs()

        response = client.post("/api/chat", json={"query": "How do I add a user?"}, headers=auth)
        assert response.status_code == 200, response.text + cairn.logs()
        body = response.json()
        assert body["citations"], body
        assert all(c["doc_id"].startswith("docs/") for c in body["citations"]), body["citations"]
        assert "[1]" in body["answer"]
        assert "cairn user add" in body["answer"]
        assert body["metadata"]["chunks_retrieved"] > 0
        assert set(body["metadata"]["timings_ms"]) >= {"retrieval", "generation", "total"}

        def counted() -> bool:
            now = client.get("/api/analytics/summary", headers=auth).json()
            return (
                now["queries"] >= before.json()["queries"] + 1
                and now["answered"] >= before.json()["answered"] + 1
            )

        wait_until(counted, timeout=30, what="QuerySubmitted and ResponseGenerated to reach analytics")
        summary = client.get("/api/analytics/summary", headers=auth).json()
        assert summary["mean_citations"] and summary["mean_citations"] >= 1
        assert summary["mean_latency_ms"] and summary["mean_latency_ms"] > 0


def test_cairn_ask_prints_a_cited_answer(cairn):
    result = cairn.cli("ask", "How do I add a user?")
    assert result.returncode == 0, result.stderr + cairn.logs()
    assert "[1]" in result.stdout and "docs/" in result.stdout


def test_status_reports_every_service_ready(cairn):
    result = cairn.cli("status")
    assert result.returncode == 0, result.stdout + cairn.logs()
    for service in ("gateway", "chat", "retrieval", "analytics"):
        assert service in result.stdout


def test_bad_token_and_bad_input_through_the_gateway(cairn):
    with httpx.Client(base_url=cairn.gateway, timeout=30) as client:
        assert client.post("/api/chat", json={"query": "hi"}, headers={"Authorization": "Bearer nope"}).status_code == 401
        auth = _login(client)
        empty = client.post("/api/chat", json={"query": "   "}, headers=auth)
        assert empty.status_code == 422 and empty.json()["error"]
        # Not text: chat refuses it (the gateway forwards bodies as they are) before retrieval sees it.
        lone = client.post("/api/chat", content=b'{"query": "add a \\ud800 user"}', headers=auth | {"Content-Type": "application/json"})
        assert lone.status_code == 400 and lone.json()["error"] == "malformed_json"
        assert client.post("/api/chat", json={"query": "How do I add a user?"}, headers=auth).status_code == 200


def test_a_follow_up_through_the_gateway_is_resolved_against_the_first_question(cairn):
    with httpx.Client(base_url=cairn.gateway, timeout=60) as client:
        auth = _login(client)
        first = client.post("/api/chat", json={"query": "How do I add a user?"}, headers=auth)
        assert first.status_code == 200, first.text + cairn.logs()
        conversation = first.json()["conversation_id"]
        follow_up = client.post(
            "/api/chat", json={"query": "And how do I list them?", "conversation_id": conversation}, headers=auth
        )
        assert follow_up.status_code == 200, follow_up.text + cairn.logs()
        body = follow_up.json()
    assert body["conversation_id"] == conversation
    assert body["metadata"]["reformulated_query"] == "How do I list a user?"
    assert "cairn user list" in body["answer"] and body["citations"], body


def test_the_answer_streams_through_the_gateway(cairn):
    with httpx.Client(base_url=cairn.gateway, timeout=60) as client:
        auth = _login(client)
        with client.stream("POST", "/api/chat/stream", json={"query": "How do I add a user?"}, headers=auth) as response:
            assert response.status_code == 200, response.read().decode() + cairn.logs()
            assert response.headers["content-type"].startswith("text/event-stream")
            names = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert names[0] == "sources" and names[-1] == "done" and "token" in names, names


def test_the_official_openai_client_uses_cairn_as_a_model(cairn):
    with httpx.Client(base_url=cairn.gateway, timeout=60) as client:
        token = _login(client)["Authorization"].removeprefix("Bearer ")
    model = openai.OpenAI(base_url=f"{cairn.gateway}/v1", api_key=token, max_retries=0)
    assert "cairn" in [m.id for m in model.models.list()]

    question = [{"role": "user", "content": "How do I add a user?"}]
    completion = model.chat.completions.create(model="cairn", messages=question)
    text = completion.choices[0].message.content
    citations = completion.model_extra["citations"]
    assert "cairn user add" in text and "[1]" in text, text
    assert citations[0]["n"] == 1 and citations[0]["doc_id"].startswith("docs/"), citations

    chunks = list(model.chat.completions.create(model="cairn", messages=question, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1].model_extra
    assert "cairn user add" in streamed and chunks[-1].choices[0].finish_reason == "stop"
    cited = {c["n"] for c in last["citations"]}
    assert cited and all(f"[{n}]" in streamed for n in cited), (streamed, last["citations"])

    follow_up = model.chat.completions.create(
        model="cairn",
        messages=[*question, {"role": "assistant", "content": text}, {"role": "user", "content": "And how do I list them?"}],
    )
    assert "cairn user list" in follow_up.choices[0].message.content


def test_the_openai_face_needs_a_valid_token(cairn):
    model = openai.OpenAI(base_url=f"{cairn.gateway}/v1", api_key="not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        model.chat.completions.create(model="cairn", messages=[{"role": "user", "content": "hi"}])


def test_ctrl_c_while_cairn_up_is_still_starting_stops_it_at_once(tmp_path, redis_url, amqp_url):
    env = cairn_env(tmp_path / "data", redis_url, amqp_url, name=f"e2e-interrupted-{os.getpid()}")
    up = subprocess.Popen([sys.executable, "-m", "cairn.cli", "up"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    state = tmp_path / "data" / "run" / "cairn.json"
    services: dict[str, int] = {}
    try:
        # The services are spawned; retrieval loads its model for many seconds before it answers.
        wait_until(lambda: state.exists() and len(json.loads(state.read_text())["services"]) == 4, timeout=60,
                   what="cairn up to spawn the services")
        services = json.loads(state.read_text())["services"]
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=30)  # before: only once every service answered, plus the demo ingest
    finally:
        up.kill()
        for pid in services.values():  # whatever a failed run left behind
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert up.returncode == 0 and "stopping Cairn" in output and "Cairn is up" not in output, output
    assert not [name for name, pid in services.items() if pid_alive(pid)], services
    assert not state.exists()
