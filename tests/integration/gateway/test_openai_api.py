"""/v1 through the official openai client, over real HTTP, in front of a chat stand-in that can fail,
refuse a question, or cut a stream short or leave it silent, with the real Redis counting questions."""
import asyncio
import hashlib
import json
import threading

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import REGISTRY
from redis import Redis

from services.gateway.main import create_app
from tests.integration.gateway.chat_stand_in import chat_like_app, gateway_settings, login
from tests.support import free_port, serve_in_thread, wait_until

pytestmark = pytest.mark.integration
QUESTION = [{"role": "user", "content": "How do I add a user?"}]


def _answer(request: Request) -> dict:
    usage = {"prompt_tokens": 696, "completion_tokens": 12, "total_tokens": 708}
    metadata = {"request_id": request.headers.get("x-request-id"), "kind": "answer", "usage": usage}
    return {"answer": "Run it [1].", "conversation_id": None, "citations": [], "sources": [], "related_docs": [],
            "confidence": {"level": "High", "score": 0.9, "reason": "r"}, "grounding": None, "metadata": metadata}


_BUSY = {"error": "llm_unavailable", "message": "the LLM is rate limiting chat", "status": 503, "retry_after": "7"}
_FILTERED = {"error": "llm_content_filtered", "message": "the model's content filter refused it", "status": 422}


def unreliable_chat() -> FastAPI:
    """Answers "fail" with chat's 502, "invalid" with chat's 422, "overflow" with chat's 500 for a prompt over the
    model's context window, "history?" with the history it was sent,
    streams "cut" without its `done` event and "silent" with a pause of 5 s before it; "busy" ends its stream
    with chat's `error` event for a rate-limited model before any token, "gone" with nothing after `sources`,
    "late busy" with that error 1 s after `sources`, "filtered" with chat's refusal of a prompt the model's
    content filter refused, and "late filtered" with that refusal 1 s after `sources`."""
    app = chat_like_app("other-llm")

    @app.post("/chat")
    async def chat(request: Request):
        query = (await request.json()).get("query")
        if query == "fail":
            return JSONResponse({"error": "llm_unavailable", "message": "the LLM failed"}, status_code=502)
        if query == "invalid":
            return JSONResponse({"error": "invalid_request", "message": "query: too long"}, status_code=422)
        if query == "overflow":
            return JSONResponse({"error": "llm_context_exceeded", "message": "the prompt is too long"}, status_code=500)
        if query == "history?":
            return {**_answer(request), "answer": json.dumps((await request.json()).get("history"))}
        return _answer(request)

    @app.post("/chat/stream")
    async def chat_stream(request: Request) -> StreamingResponse:
        query = (await request.json()).get("query")

        async def events():
            yield f"event: sources\ndata: {json.dumps({'sources': []})}\n\n"
            if query in ("busy", "late busy"):
                await asyncio.sleep(1 if query == "late busy" else 0)
                yield f"event: error\ndata: {json.dumps(_BUSY)}\n\n"
            if query in ("filtered", "late filtered"):
                await asyncio.sleep(1 if query == "late filtered" else 0)
                yield f"event: error\ndata: {json.dumps(_FILTERED)}\n\n"
            if query in ("busy", "late busy", "gone", "filtered", "late filtered"):
                return
            yield f"event: token\ndata: {json.dumps({'text': 'Run'})}\n\n"
            if query == "silent":
                await asyncio.sleep(5)
            if query != "cut":
                yield f"event: done\ndata: {json.dumps(_answer(request))}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def chat_url():
    with serve_in_thread(unreliable_chat()) as url:
        yield url


@pytest.fixture
def gateway(redis_url, unique, chat_url):
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url, chat_requests_per_minute=3)
    with serve_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture
def token(gateway) -> str:
    with httpx.Client(base_url=gateway) as client:
        return login(client)["Authorization"].removeprefix("Bearer ")


def _client(gateway: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key=token, max_retries=0)


def _ask(client: openai.OpenAI, content: str = "How do I add a user?", **fields):
    return client.chat.completions.create(model="cairn", messages=[{"role": "user", "content": content}], **fields)


def test_the_openai_client_reads_the_message_and_code_of_every_error(gateway, token):
    with pytest.raises(openai.AuthenticationError) as bad_key:
        _ask(_client(gateway, "not-a-token"))
    assert (bad_key.value.status_code, bad_key.value.code) == (401, "unauthorized")
    assert bad_key.value.type == "authentication_error" and bad_key.value.message.endswith("invalid or expired token")

    client = _client(gateway, token)
    with pytest.raises(openai.BadRequestError) as no_question:
        client.chat.completions.create(model="cairn", messages=[{"role": "system", "content": "be brief"}])
    error = no_question.value
    assert (error.status_code, error.code, error.type, error.param) == (400, "invalid_request", "invalid_request_error", "messages")
    assert "at least one user message must have text" in error.message

    with pytest.raises(openai.InternalServerError) as failed:
        _ask(client, "fail")
    assert (failed.value.status_code, failed.value.code, failed.value.type) == (502, "llm_unavailable", "server_error")
    assert failed.value.message.endswith("the LLM failed")

    with pytest.raises(openai.BadRequestError) as two_choices:
        _ask(client, n=2)
    assert (two_choices.value.code, two_choices.value.param) == ("invalid_request", "n")
    assert two_choices.value.message.endswith("n: Cairn answers with one choice; n must be 1 or left out")


def test_a_session_left_with_no_role_cairn_knows_is_a_permission_error(gateway, token, redis_url, unique):
    # Every role may use /v1, so only a session whose stored roles were all edited away by hand reaches the 403.
    raw = Redis.from_url(redis_url, decode_responses=True)
    raw.hset(f"{unique}:session:{hashlib.sha256(token.encode()).hexdigest()}", "roles", "owner")
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _ask(_client(gateway, token))
    error = refused.value
    assert (error.status_code, error.type, error.code) == (403, "permission_error", "forbidden")
    assert error.message.endswith("this needs the user role")


def test_a_v1_path_no_route_matches_is_answered_in_openais_shape(gateway, token):
    headers = {"Authorization": f"Bearer {token}"}
    for path in ("/v1/models/a%0Ab", "/v1/embeddings"):  # a newline is outside the {model:path} pattern
        response = httpx.get(f"{gateway}{path}", headers=headers)
        assert response.status_code == 404
        assert response.json() == {"error": {"message": "Not Found", "type": "not_found_error", "code": "not_found",
                                             "param": None}}
    assert httpx.get(f"{gateway}/api/nothing-here", headers=headers).json()["error"] == "not_found"


def test_a_method_a_v1_route_does_not_take_is_405_in_openais_shape(gateway, token):
    response = httpx.delete(f"{gateway}/v1/chat/completions", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["error"] | {"message": None} == {
        "message": None, "type": "invalid_request_error", "code": "method_not_allowed", "param": None}


def test_a_question_over_the_rate_limit_is_a_rate_limit_error_with_its_retry_after(gateway, token):
    client = _client(gateway, token)
    for _ in range(3):  # CHAT_REQUESTS_PER_MINUTE of this gateway
        _ask(client)
    with pytest.raises(openai.RateLimitError) as limited:
        _ask(client)
    error = limited.value
    assert (error.status_code, error.type, error.code) == (429, "rate_limit_error", "rate_limited")
    assert int(error.response.headers["retry-after"]) > 0


def test_a_body_naming_a_key_twice_is_malformed_json_in_the_shape_of_its_route(gateway, token):
    json_type = {"Content-Type": "application/json"}
    login = httpx.post(f"{gateway}/auth/login", content=b'{"username": "bob", "password": "x", "username": "ann"}',
                       headers=json_type)
    assert (login.status_code, login.json()["error"]) == (400, "malformed_json"), login.text
    assert login.json()["message"] == 'request body is not valid JSON: duplicate key "username" in an object'
    body = b'{"model": "cairn", "messages": [{"role": "user", "content": "a", "content": "b"}]}'
    completion = httpx.post(f"{gateway}/v1/chat/completions", content=body,
                            headers=json_type | {"Authorization": f"Bearer {token}"})
    assert completion.status_code == 400, completion.text
    assert completion.json()["error"] == {"message": 'request body is not valid JSON: duplicate key "content" in an object',
                                          "type": "invalid_request_error", "code": "malformed_json", "param": None}


def test_the_api_routes_keep_cairns_error_shape(gateway):
    response = httpx.post(f"{gateway}/api/chat", json={"query": "q"}, headers={"Authorization": "Bearer nonsense"})
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"


def test_a_model_is_retrieved_from_the_models_list(gateway, token):
    client = _client(gateway, token)
    assert [m.id for m in client.models.list()] == ["cairn", "stand-in-llm", "other-llm"]
    assert client.models.retrieve("other-llm").model_dump() == client.models.list().data[2].model_dump()
    assert client.models.retrieve("cairn").owned_by == "cairn"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4o")
    assert (missing.value.code, missing.value.type) == ("model_not_found", "not_found_error")


def test_fields_sent_as_null_mean_their_default(gateway, token):
    nulls = {"model": None, "stream": None, "stream_options": None, "temperature": None, "top_p": None, "n": None,
             "max_tokens": None, "max_completion_tokens": None, "stop": None, "presence_penalty": None,
             "frequency_penalty": None, "logit_bias": None, "user": None, "seed": None, "tools": None,
             "tool_choice": None, "response_format": None}
    response = httpx.post(
        f"{gateway}/v1/chat/completions", json={"messages": QUESTION, **nulls}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion" and response.json()["model"] == "stand-in-llm"


def test_a_long_conversation_sent_whole_each_turn_is_still_answered(gateway, token):
    turns = [m for n in range(120) for m in ({"role": "user", "content": f"Question {n}?"},
                                              {"role": "assistant", "content": "Run it [1]."})]
    messages = [{"role": "system", "content": "Be brief."}, *turns, *QUESTION]  # as Open WebUI sends them
    answer = _client(gateway, token).chat.completions.create(model="cairn", messages=messages)
    assert answer.choices[0].message.content == "Run it [1]."


def test_a_stream_cut_short_by_chat_ends_with_an_error(gateway, token):
    client = _client(gateway, token)
    assert "".join(c.choices[0].delta.content or "" for c in _ask(client, stream=True) if c.choices) == "Run"
    with pytest.raises(openai.APIError) as cut:
        for _ in _ask(client, "cut", stream=True):
            pass
    assert cut.value.code == "chat_unavailable" and "before the answer was complete" in cut.value.message

    with httpx.stream("POST", f"{gateway}/v1/chat/completions", headers={"Authorization": f"Bearer {token}"},
                      json={"messages": [{"role": "user", "content": "cut"}], "stream": True}) as raw:
        lines = [line for line in raw.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[-2].removeprefix("data: "))["error"]["type"] == "server_error"


def test_a_model_failing_before_its_first_word_gets_its_status_as_a_whole_answer_would(gateway, token):
    with pytest.raises(openai.APIStatusError) as busy:  # not a 200 stream holding the error: the client can retry
        _ask(_client(gateway, token), "busy", stream=True)
    assert (busy.value.status_code, busy.value.code, busy.value.type) == (503, "llm_unavailable", "service_unavailable_error")
    assert busy.value.response.headers["Retry-After"] == "7" and busy.value.message.endswith("rate limiting chat")

    with pytest.raises(openai.APIStatusError) as gone:
        _ask(_client(gateway, token), "gone", stream=True)
    assert (gone.value.status_code, gone.value.code) == (503, "chat_unavailable")


def test_a_model_failing_after_the_first_keepalive_is_due_ends_the_begun_stream(redis_url, unique, chat_url):
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url, sse_keepalive_s=0.2)
    with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
        headers = login(http)
        with http.stream("POST", "/v1/chat/completions", headers=headers,
                         json={"messages": [{"role": "user", "content": "late busy"}], "stream": True}) as raw:
            lines = list(raw.iter_lines())
    assert raw.status_code == 200 and ": keep-alive" in lines, "the status went out when a keep-alive fell due"
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    assert data[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert data[-1]["error"]["code"] == "llm_unavailable" and [line for line in lines if line][-1] == "data: [DONE]"


def test_a_stream_chat_leaves_silent_ends_with_chat_timeout(redis_url, unique, chat_url):
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url, upstream_timeout_s=0.5)
    with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
        token = login(http)["Authorization"].removeprefix("Bearer ")
        with pytest.raises(openai.APIError) as silent:
            for _ in _ask(_client(gateway, token), "silent", stream=True):
                pass
    assert silent.value.code == "chat_timeout" and silent.value.message == "chat did not answer in time"


def test_a_streamed_completion_is_named_by_the_request_id_as_a_whole_one_is(gateway, token):
    client = _client(gateway, token)
    whole = _ask(client, extra_headers={"X-Request-ID": "named-1"})
    chunks = list(_ask(client, stream=True, extra_headers={"X-Request-ID": "named-2"}))
    assert whole.id == "chatcmpl-named-1" and {chunk.id for chunk in chunks} == {"chatcmpl-named-2"}


def test_refused_questions_use_up_no_limit_and_free_their_request_id(gateway, token):
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=gateway, headers=auth) as client:
        for n in range(5):  # the limit is 3
            refused = client.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "q"}]},
                                  headers={"X-Request-ID": f"refused-{n}"})
            assert refused.status_code == 400
        corrected = client.post("/v1/chat/completions", json={"messages": QUESTION}, headers={"X-Request-ID": "refused-0"})
        assert corrected.status_code == 200, corrected.text

        refused_by_chat = client.post("/api/chat", json={"query": "invalid"}, headers={"X-Request-ID": "refused-1"})
        assert refused_by_chat.status_code == 422 and refused_by_chat.json()["error"] == "invalid_request"
        reused = client.post("/api/chat", json={"query": "q"}, headers={"X-Request-ID": "refused-0"})
        assert reused.status_code == 409  # taken by the answered question: refused, not counted either
        assert client.post("/api/chat", json={"query": "q"}, headers={"X-Request-ID": "refused-1"}).status_code == 200

        assert client.post("/api/chat", json={"query": "fail"}).status_code == 502  # asked: chat failed, not refused
        over = client.post("/v1/chat/completions", json={"messages": QUESTION})
        assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limited"


def test_a_question_chat_refuses_once_its_stream_began_frees_its_request_id_and_count(gateway, token):
    with httpx.Client(base_url=gateway, headers={"Authorization": f"Bearer {token}"}) as client:
        for n in range(4):  # the limit is 3
            refused = client.post(
                "/api/chat/stream", json={"query": "filtered"}, headers={"X-Request-ID": f"filtered-{n}"}
            )
            assert refused.status_code == 200 and '"status": 422' in refused.text, refused.text
        reworded = client.post("/api/chat/stream", json={"query": "q"}, headers={"X-Request-ID": "filtered-0"})
        assert reworded.status_code == 200 and "event: done" in reworded.text, reworded.text


def test_a_refusal_after_the_v1_stream_began_frees_its_request_id_and_count(redis_url, unique, chat_url):
    settings = gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=chat_url, sse_keepalive_s=0.2, chat_requests_per_minute=3
    )
    with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
        headers = login(http)
        for n in range(4):  # the limit is 3
            body = {"messages": [{"role": "user", "content": "late filtered"}], "stream": True}
            refused = http.post("/v1/chat/completions", json=body, headers={**headers, "X-Request-ID": f"late-{n}"})
            assert refused.status_code == 200 and '"code":"llm_content_filtered"' in refused.text.replace(" ", "")
        reworded = http.post("/v1/chat/completions", json={"messages": QUESTION},
                             headers={**headers, "X-Request-ID": "late-0"})
    assert reworded.status_code == 200, reworded.text


def test_a_question_that_never_reached_chat_keeps_neither_its_request_id_nor_its_count(redis_url, unique):
    nothing = f"http://127.0.0.1:{free_port()}"  # no chat replica takes the connection
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=nothing, chat_requests_per_minute=2)
    with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
        headers = {**login(http), "X-Request-ID": "never-delivered"}
        for _ in range(3):  # over the limit of 2, and the same request id each time
            lost = http.post("/api/chat", json={"query": "q"}, headers=headers)
            assert (lost.status_code, lost.json()["error"]) == (503, "chat_unavailable"), lost.text
        v1 = http.post("/v1/chat/completions", json={"messages": QUESTION}, headers=headers)
        assert v1.status_code == 503 and "x-should-retry" not in v1.headers, "a resend is asked, not refused"


def _retrying_client(gateway: str, token: str, attempts: list[int]) -> openai.OpenAI:
    """The official client with its default retries, counting the requests it sends in `attempts`."""
    http = httpx.Client(event_hooks={"request": [lambda request: attempts.append(1)]})
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key=token, http_client=http)


def test_the_client_retries_no_question_that_its_request_id_would_make_a_409(gateway, token):
    attempts: list[int] = []
    client = _retrying_client(gateway, token, attempts)
    _ask(client, extra_headers={"X-Request-ID": "own-1"})
    with pytest.raises(openai.ConflictError) as reused:
        _ask(client, extra_headers={"X-Request-ID": "own-1"})
    assert reused.value.code == "request_id_taken" and len(attempts) == 2, "a 409 is not retried"

    attempts.clear()
    with pytest.raises(openai.InternalServerError) as failed:  # not hidden by the 409 a retry would get
        _ask(client, "fail", extra_headers={"X-Request-ID": "own-2"})
    assert (failed.value.status_code, failed.value.code, len(attempts)) == (502, "llm_unavailable", 1)


def test_the_client_still_retries_a_failed_question_whose_request_id_the_gateway_chose(gateway, token):
    attempts: list[int] = []
    with pytest.raises(openai.InternalServerError) as failed:
        _ask(_retrying_client(gateway, token, attempts), "fail")
    assert (failed.value.code, len(attempts)) == ("llm_unavailable", 3)


def test_the_client_does_not_retry_a_prompt_too_long_for_the_model(gateway, token):
    attempts: list[int] = []  # each attempt would run retrieval and the model again, and count against the limit
    with pytest.raises(openai.InternalServerError) as failed:
        _ask(_retrying_client(gateway, token, attempts), "overflow")
    assert (failed.value.code, len(attempts)) == ("llm_context_exceeded", 1)


def test_a_stream_asked_to_include_usage_ends_with_a_usage_chunk_without_choices(gateway, token):
    chunks = list(_ask(_client(gateway, token), stream=True, stream_options={"include_usage": True}))
    *answer, usage = chunks
    assert usage.choices == [] and usage.usage.total_tokens == 708 and usage.usage.prompt_tokens == 696
    assert answer[-1].choices[0].finish_reason == "stop" and "citations" in answer[-1].model_extra
    assert all(chunk.usage is None for chunk in answer), "usage counted once, as clients add up every chunk's"
    assert usage.id == answer[0].id and usage.model == "stand-in-llm"


def test_a_demand_for_a_tool_call_or_json_is_refused_and_tools_offered_freely_are_ignored(gateway, token):
    client = _client(gateway, token)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    forced = {"type": "function", "function": {"name": "lookup"}}
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    for param, fields in (("tool_choice", {"tools": tools, "tool_choice": "required"}),
                          ("tool_choice", {"tools": tools, "tool_choice": forced}),
                          ("response_format", {"response_format": {"type": "json_object"}}),
                          ("response_format", {"response_format": schema})):
        with pytest.raises(openai.BadRequestError) as refused:
            _ask(client, **fields)
        assert (refused.value.code, refused.value.param) == ("invalid_request", param), fields
        assert "Cairn answers in text" in refused.value.message

    for fields in ({"tools": tools, "tool_choice": "auto"}, {"tool_choice": "none"},
                   {"response_format": {"type": "text"}}):
        assert _ask(client, **fields).choices[0].message.content == "Run it [1].", fields


def test_a_function_call_demanded_the_older_way_is_refused_as_a_tool_call_is(gateway, token):
    client = _client(gateway, token)
    functions = [{"name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    with pytest.raises(openai.BadRequestError) as refused:
        _ask(client, functions=functions, function_call={"name": "lookup"})
    assert (refused.value.code, refused.value.param) == ("invalid_request", "function_call")
    assert "Cairn answers in text" in refused.value.message

    for function_call in ("auto", "none"):
        assert _ask(client, functions=functions, function_call=function_call).choices[0].message.content == "Run it [1]."


def test_a_turn_that_called_a_tool_keeps_the_answer_that_followed_the_call(gateway, token):
    call = {"id": "call-1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [{"role": "user", "content": "How do I log out?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call-1", "content": "{}"},
                {"role": "assistant", "content": [{"type": "text", "text": "Call POST /auth/logout [1]."}]},
                {"role": "user", "content": "history?"}]
    answer = _client(gateway, token).chat.completions.create(model="cairn", messages=messages)
    assert json.loads(answer.choices[0].message.content) == [
        {"question": "How do I log out?", "answer": "Call POST /auth/logout [1]."}
    ]


def test_a_body_over_the_limit_is_refused_in_openais_shape(gateway, token):
    history = [{"role": "user", "content": "q " * 300_000}, {"role": "assistant", "content": "a " * 300_000}]
    with pytest.raises(openai.APIStatusError) as too_large:  # MAX_BODY_BYTES: 1 MiB, told by Content-Length
        _client(gateway, token).chat.completions.create(model="cairn", messages=[*history, *QUESTION])
    assert too_large.value.status_code == 413
    assert (too_large.value.code, too_large.value.type) == ("payload_too_large", "invalid_request_error")
    assert "MAX_BODY_BYTES" in too_large.value.message


def test_content_of_the_wrong_shape_is_refused_naming_the_content_field(gateway, token):
    client = _client(gateway, token)
    for content in (5, {"type": "text"}, ["a part that is not an object"], [{"text": "no type"}]):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="cairn", messages=[{"role": "user", "content": content}])
        assert (refused.value.code, refused.value.param) == ("invalid_request", "messages.0.content"), content
        assert "messages.0.content: must be a string or a list of content parts" in refused.value.message, content


def test_a_nul_character_in_any_turn_is_refused_naming_its_message(gateway, token):
    client = _client(gateway, token)
    conversations = (
        ([{"role": "user", "content": "What is\u0000 Redis?"}], "messages.0.content"),
        ([{"role": "user", "content": [{"type": "text", "text": "What is\u0000 Redis?"}]}], "messages.0.content"),
        ([{"role": "user", "content": "What is Redis?"}, {"role": "assistant", "content": "A store\u0000 [1]."},
          {"role": "user", "content": "Who runs it?"}], "messages.1.content"),
    )
    for messages, where in conversations:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="cairn", messages=messages)
        assert (refused.value.code, refused.value.param) == ("invalid_request", where), messages
        assert refused.value.message.endswith(f" {where}: must not contain NUL characters (U+0000)"), messages


def garbled_chat(body: str, *, models_too: bool) -> FastAPI:
    """A chat that answers 200 with `body`: its answer, each event of its stream and, `models_too`, its model list."""
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/models")
    async def models() -> Response:
        listed = json.dumps({"default": "stand-in-llm", "models": ["stand-in-llm"]})
        return Response(body if models_too else listed, media_type="application/json")

    @app.post("/chat")
    async def chat() -> Response:
        return Response(body, media_type="application/json")

    @app.post("/chat/stream")
    async def chat_stream() -> StreamingResponse:
        async def events():
            yield f"event: token\ndata: {body}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def _v1_answers(redis_url: str, unique: str, chat: FastAPI) -> list[httpx.Response]:
    with serve_in_thread(chat) as chat_url:
        settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url)
        with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
            headers = login(http)
            return [
                http.get("/v1/models", headers=headers),
                http.get("/v1/models/cairn", headers=headers),
                *(http.post("/v1/chat/completions", headers=headers, json={"messages": QUESTION, "stream": stream})
                  for stream in (False, True)),
            ]


@pytest.mark.parametrize("body", ["<html>Bad gateway</html>", '{"unexpected": "shape"}', "[]", '"text"'])
def test_a_chat_answering_garbage_with_200_is_chat_unavailable_not_an_internal_error(redis_url, unique, body):
    models_garbled = _v1_answers(redis_url, unique, garbled_chat(body, models_too=True))
    answer_garbled = _v1_answers(redis_url, f"{unique}-answer", garbled_chat(body, models_too=False))
    for answer in [*models_garbled, *answer_garbled[2:]]:
        assert answer.status_code == 503, (answer.request.url, answer.text)
        assert answer.json()["error"]["code"] == "chat_unavailable" and answer.headers["Retry-After"] == "5"
        assert "chat is unavailable: its answer could not be read" in answer.json()["error"]["message"]


def page_streaming_chat() -> FastAPI:
    """A chat (or a proxy in front of it) that answers POST /chat/stream with 200 and a web page, no event stream."""
    app = chat_like_app()

    @app.post("/chat/stream")
    async def chat_stream() -> Response:
        return Response("<html>Welcome to nginx!</html>", media_type="text/html")

    return app


def test_a_stream_answered_with_a_page_instead_of_events_is_chat_unavailable(redis_url, unique):
    with serve_in_thread(page_streaming_chat()) as chat_url:
        settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url)
        with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
            client = _client(gateway, login(http)["Authorization"].removeprefix("Bearer "))
            with pytest.raises(openai.InternalServerError) as unavailable:
                list(_ask(client, stream=True))
    error = unavailable.value
    assert (error.status_code, error.code, error.type) == (503, "chat_unavailable", "service_unavailable_error")
    assert error.message.endswith("chat is unavailable: its answer could not be read")
    assert error.response.headers["Retry-After"] == "5"


def test_a_client_leaving_before_the_first_word_stops_chat_at_once(redis_url, unique):
    """The status waits for the model's first word, up to SSE_KEEPALIVE_S: a client that leaves meanwhile
    once kept chat (and its model) at work until that wait was over."""
    chat_stopped = threading.Event()
    app = chat_like_app()

    @app.post("/chat/stream")
    async def slow_to_start() -> StreamingResponse:
        async def events():
            try:
                yield f"event: sources\ndata: {json.dumps({'sources': []})}\n\n"
                await asyncio.sleep(30)  # the model thinking
                yield f"event: token\ndata: {json.dumps({'text': 'Run'})}\n\n"
            finally:
                chat_stopped.set()

        return StreamingResponse(events(), media_type="text/event-stream")

    with serve_in_thread(app) as chat_url:
        settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url, sse_keepalive_s=30)
        with serve_in_thread(create_app(settings)) as gateway, httpx.Client(base_url=gateway) as http:
            headers = login(http)
            body = {"messages": [{"role": "user", "content": "How do I add a user?"}], "stream": True}
            left_before = _client_closed_count()
            with pytest.raises(httpx.ReadTimeout):  # no status yet: the gateway waits for the first word
                http.post("/v1/chat/completions", headers=headers, json=body, timeout=1)
            assert chat_stopped.wait(10), "chat still at work after its client left"
            # docs/api.md: the request line (and the request metrics) say 499, nginx's "client closed request".
            wait_until(lambda: _client_closed_count() == left_before + 1, timeout=10, what="a request counted as 499")


def _client_closed_count() -> float:
    labels = {"service": "gateway", "method": "POST", "route": "/v1/chat/completions", "status": "499"}
    return REGISTRY.get_sample_value("cairn_http_requests_total", labels) or 0.0
