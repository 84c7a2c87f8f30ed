"""The bodies of the `cairn` sub-commands; cli.py only parses arguments and calls these."""
from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import NoReturn

import httpx

from cairn import demo
from cairn.engines import EngineMissing, engines_for, ensure
from cairn.exit_status import INTERRUPTED
from cairn.ingest import IngestError, NotRetrieval, RetrievalUnreachable
from cairn.settings import SERVICES, CliSettings
from cairn.retry_after import try_again_in
from cairn.run_state import (
    UnreadableState,
    hold_run_lock,
    read_state,
    run_lock_holder,
    stale_state,
    state_file,
    still_running,
)
from cairn.supervisor import CHROMA, Child, StartFailed, Supervisor
from services.gateway.adapters.redis_store import RedisSessionStore, RedisUserStore, connect
from services.gateway.domain import User
from services.gateway.users import (
    UserChange,
    UserError,
    add_user,
    check_new_username,
    check_password,
    check_user_exists,
    delete_user,
    disable_user,
    enable_user,
    reset_password,
    set_roles,
)
from shared.errors import DependencyUnavailable
from shared.json_types import is_blank


class StopRequested(Exception):
    """Ctrl-C or `cairn down` while `cairn up` is still starting."""


def up(settings: CliSettings, *, ingest_demo: bool = True) -> int:
    if settings.demo_password:  # else it is refused only once the services have started and the docs are in
        try:
            check_password(settings.demo_password)
        except UserError as exc:
            print(f"cannot start: CAIRN_DEMO_PASSWORD: {exc}", file=sys.stderr)
            return 1
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"cannot start: CAIRN_DATA_DIR: {settings.data_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        lock = hold_run_lock(settings)
    except OSError as exc:
        print(f"cannot start: {settings.run_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if lock is None:  # another `cairn up` of this data directory, perhaps still before its state file
        holder = run_lock_holder(settings)
        print(f"Cairn is already running{f' (pid {holder})' if holder else ''}; `cairn status` or `cairn down`.",
              file=sys.stderr)
        return 1
    with lock:
        return _up(settings, ingest_demo=ingest_demo)


def _up(settings: CliSettings, *, ingest_demo: bool) -> int:
    if state := _read_state(settings):
        if still_running(state, state["supervisor"]):
            print(f"Cairn is already running (pid {state['supervisor']}); `cairn status` or `cairn down`.", file=sys.stderr)
            return 1
        if left := {name: pid for name, pid in state["services"].items() if still_running(state, pid)}:
            running = ", ".join(f"{name} (pid {pid})" for name, pid in left.items())
            print(f"cannot start: the processes of an earlier `cairn up` whose supervisor stopped still run: "
                  f"{running}; stop them with `cairn down` first.", file=sys.stderr)
            return 1
    try:
        for engine in engines_for(redis_url=settings.redis_url, amqp_url=settings.amqp_url):
            ensure(engine)
    except EngineMissing as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 1

    stopping = starting = False

    def request_stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        if starting:  # stop the start-up where it is: waiting for a service, adding the demo collection
            raise StopRequested

    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: its terminal was closed
        signal.signal(stop_signal, request_stop)

    try:
        supervisor = Supervisor(settings)
        supervisor.check_ports()  # before "starting ...": a port in use is one line, and nothing to stop
    except StartFailed as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 1
    print(f"starting {supervisor.describe()} ...", flush=True)
    try:
        starting = True
        supervisor.start_all()
        not_ready = _warn_of_services_not_ready(supervisor)
        if ingest_demo and "retrieval" in not_ready:  # its collection cannot be looked at: no reason to stop Cairn
            print("warning: the demo collection was not looked for, as retrieval is not ready; "
                  "a later `cairn up` adds it", flush=True)
        elif ingest_demo and demo.collection_is_empty(settings):
            print(f"first run: adding the demo collection ({demo.DOCS_DIR.name}/) ...", flush=True)
            demo.ingest_docs(settings)
        password = demo.create_demo_user(settings)
        starting = False
        _print_welcome(settings, password, children=supervisor.children)
        supervisor.watch(lambda: stopping)
    except StopRequested:
        pass
    except (StartFailed, IngestError, httpx.HTTPError, OSError) as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 1
    except UserError as exc:  # the demo user
        print(f"cannot start: demo user: {exc}", file=sys.stderr)
        return 1
    except DependencyUnavailable as exc:  # Redis took the connection but refused the demo user's commands
        print(f"cannot start: demo user: {_redis_trouble(exc)}", file=sys.stderr)
        return 1
    finally:
        starting = False
        # Its terminal may be gone (closed: SIGHUP) or the reader of its output: the services are stopped anyway.
        with contextlib.suppress(OSError):
            print("stopping Cairn ...", flush=True)
        supervisor.stop_all()
    return 0


def _warn_of_services_not_ready(supervisor: Supervisor) -> set[str]:
    """Warns of each service that answers but says a dependency it needs is down; Cairn starts anyway, as
    the dependency may still come up. Returns their names."""
    not_ready = supervisor.not_ready()
    for name, what in not_ready.items():
        print(f"warning: {name} is not ready: {what} (see {supervisor.log_path(name)})", flush=True)
    return set(not_ready)


def _print_welcome(settings: CliSettings, password: str | None, *, children: list[Child]) -> None:
    url = settings.local_url_of("gateway")
    if len(children) > len(SERVICES):
        print("processes: " + ", ".join(f"{child.name} {child.url}" for child in children), flush=True)
    if password is None:
        login = (
            f"  user: {demo.DEMO_USER}, password not shown: it came from CAIRN_DEMO_PASSWORD, or an administrator "
            "has disabled the user or given it another password since: log in as yours\n"
        )
    else:
        login = (
            f"  user: {demo.DEMO_USER}\n"
            f"  password: {password}\n"
            f"  ask:  cairn ask \"How do I add a user?\"\n"
            f"  curl: curl -s {url}/auth/login -H 'Content-Type: application/json' "
            f"-d '{{\"username\":\"{demo.DEMO_USER}\",\"password\":\"{password}\"}}'\n"
        )
    print(
        f"\nCairn is up at {url}\n{login}"
        f"  chat page: {url}/    dashboard (analysts): {url}/dashboard\n"
        f"  logs: {settings.log_dir}/    stop: Ctrl-C or `cairn down`\n",
        flush=True,
    )


def down(settings: CliSettings, *, timeout_s: float = 30.0) -> int:
    state = _read_state(settings)
    if not state:
        return _nothing_to_stop(settings)
    supervisor, children = state["supervisor"], state["services"]
    if still_running(state, supervisor):  # it stops its processes in order
        _stop_processes(state, [supervisor], wait_for=[supervisor, *children.values()], timeout_s=timeout_s)
    else:
        # Without it, the services are asked to stop themselves (and flush their outboxes), then the Chroma
        # server: a retrieval replica still stopping would otherwise retry it until it is killed.
        for group in ([pid for name, pid in children.items() if name != CHROMA], [children.get(CHROMA)]):
            pids = [pid for pid in group if pid is not None]
            _stop_processes(state, pids, wait_for=pids, timeout_s=timeout_s)
    try:
        state_file(settings).unlink(missing_ok=True)
    except OSError as exc:  # a folder in its place, say: the next `cairn up` cannot write it either
        print(f"error: cannot remove the state file {state_file(settings)}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print("Cairn stopped.")
    return 0


def _nothing_to_stop(settings: CliSettings) -> int:
    """No state file: Cairn is not running, unless its services answer at their ports, started by a `cairn up`
    with another data directory (the default ./data is relative to the folder it ran in)."""
    path = state_file(settings).absolute()
    for name in reversed(SERVICES):  # the gateway first: the one the operator knows
        url = settings.local_url_of(name)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                print(f"error: no state file {path}, but Cairn's {name} answers at {url}: it was started with "
                      "another CAIRN_DATA_DIR (./data is relative to the folder `cairn up` ran in); run `cairn down` "
                      "with that CAIRN_DATA_DIR, or from that folder", file=sys.stderr)
                return 1
    print(f"Cairn is not running (no state file {path}).")
    return 0


def _read_state(settings: CliSettings) -> dict | None:
    """The state file of the last `cairn up`; one that cannot be read is said so and taken as stale."""
    try:
        return read_state(settings)
    except UnreadableState as exc:
        print(f"warning: unreadable state file, taken as stale: {exc}", file=sys.stderr)
        return stale_state()


def _stop_processes(state: dict, pids: list[int], *, wait_for: list[int], timeout_s: float) -> None:
    """SIGTERM to `pids`; once `wait_for` have all gone or `timeout_s` has passed, SIGKILL to those left."""
    _signal_running(state, pids, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(still_running(state, pid) for pid in wait_for) and time.monotonic() < deadline:
        time.sleep(0.2)
    _signal_running(state, wait_for, signal.SIGKILL)  # whatever ignored SIGTERM


def _signal_running(state: dict, pids: list[int], signum: int) -> None:
    for pid in pids:
        if still_running(state, pid):
            with contextlib.suppress(ProcessLookupError):  # it ended since
                os.kill(pid, signum)


def status(settings: CliSettings) -> int:
    state = _read_state(settings)
    rows = _status_rows(settings, state)
    width = max(10, *(len(name) for name, _ in rows))
    all_ready = True
    for name, url in rows:
        ready, line = _chroma_status(url) if name == CHROMA else _service_status(url, service=name.split("-")[0])
        all_ready &= ready
        print(f"{name:<{width}} {url:<24} {line}")
    if state and not still_running(state, state["supervisor"]):
        print("the `cairn up` that started these is not running: nothing restarts a service that stops; "
              "run `cairn down`, then `cairn up`")
        return 1
    return 0 if all_ready else 1


def _status_rows(settings: CliSettings, state: dict | None) -> list[tuple[str, str]]:
    """Each service, followed by its further replicas and preceded by the Chroma server, at the addresses
    a running `cairn up` recorded in its `state` file (else those the settings give)."""
    started = (state or {}).get("urls", {})
    rows = [(CHROMA, started[CHROMA])] if CHROMA in started else []
    for name in SERVICES:
        rows.append((name, started.get(name, settings.url_of(name))))
        rows += [(replica, url) for replica, url in started.items() if replica.startswith(f"{name}-")]
    return rows


def _service_status(url: str, *, service: str) -> tuple[bool, str]:
    try:
        response = httpx.get(f"{url}/readyz", timeout=3)
    except httpx.HTTPError:
        return False, "not answering"
    checks = (_json_object(response) or {}).get("checks")
    if not isinstance(checks, dict):  # a proxy's error page, another program at a wrong <SERVICE>_URL or port
        return False, f"not a Cairn service: /readyz answered {response.status_code} without its checks"
    # Every Cairn service answers /readyz with checks: only /healthz names which one is at a mistyped URL or port.
    if (found := _service_named_at(url)) not in (None, service):
        return False, f"not {service}: the {found} service answers here"
    ready = response.status_code == 200
    detail = ", ".join(f"{k}={'ok' if v else 'DOWN'}" for k, v in checks.items())
    return ready, f"{'ready' if ready else 'NOT READY'}  {detail}"


def _service_named_at(url: str) -> str | None:
    """The service that /healthz at `url` names; None when it names none."""
    try:
        name = (_json_object(httpx.get(f"{url}/healthz", timeout=3)) or {}).get("service")
    except httpx.HTTPError:
        return None
    return name if isinstance(name, str) else None


def _chroma_status(url: str) -> tuple[bool, str]:
    try:
        ready = httpx.get(f"{url}/api/v2/heartbeat", timeout=3).status_code == 200
    except httpx.HTTPError:
        ready = False
    return ready, "ready" if ready else "not answering"


def user_add(settings: CliSettings, *, username: str, roles: list[str], password_stdin: bool) -> int:
    refused, _ = _try_user_action(settings, lambda users, sessions: check_new_username(users=users, username=username))
    if refused:
        return refused  # before the password is typed, twice
    password = _read_password(password_stdin, confirm=True)
    return _run_user_command(
        settings,
        lambda users, sessions: add_user(users=users, username=username, password=password, roles=roles),
        lambda user: f"added {user.username} ({', '.join(user.roles)})",
    )


def _listed(user: User) -> str:
    line = f"{user.username:<24} {','.join(user.roles)}{'  (disabled)' if user.disabled else ''}"
    # A record edited by hand or by an older version: the fields to repair (set-role, reset-password) or delete
    return f"{line}  (damaged: {', '.join(user.problems)})" if user.problems else line


def user_list(settings: CliSettings) -> int:
    def describe(users: list[User]) -> str:
        return "\n".join(_listed(u) for u in users) or "no users"

    return _run_user_command(settings, lambda users, sessions: users.list(), describe, changes=False)


def user_disable(settings: CliSettings, *, username: str) -> int:
    return _run_user_command(
        settings,
        lambda users, sessions: disable_user(users=users, sessions=sessions, username=username),
        lambda change: f"disabled {username}; {_ended(change)}",
    )


def user_delete(settings: CliSettings, *, username: str) -> int:
    return _run_user_command(
        settings,
        lambda users, sessions: delete_user(users=users, sessions=sessions, username=username),
        lambda change: f"deleted {username}; {_ended(change)}",
    )


def user_enable(settings: CliSettings, *, username: str) -> int:
    return _run_user_command(
        settings, lambda users, sessions: enable_user(users=users, username=username), lambda user: f"enabled {username}"
    )


def user_set_role(settings: CliSettings, *, username: str, roles: list[str]) -> int:
    return _run_user_command(
        settings,
        lambda users, sessions: set_roles(users=users, sessions=sessions, username=username, roles=roles),
        lambda change: f"{username} now has the roles {', '.join(change.user.roles)}; {_ended(change)}",
    )


def user_reset_password(settings: CliSettings, *, username: str, password_stdin: bool) -> int:
    refused, _ = _try_user_action(settings, lambda users, sessions: check_user_exists(users=users, username=username))
    if refused:
        return refused  # before the password is typed, twice
    password = _read_password(password_stdin, confirm=True)
    return _run_user_command(
        settings,
        lambda users, sessions: reset_password(users=users, sessions=sessions, username=username, password=password),
        lambda change: f"new password set for {username}; {_ended(change)}",
    )


def _ended(change: UserChange) -> str:
    count = change.sessions_ended
    return f"{count} session{'' if count == 1 else 's'} ended"


def _run_user_command(settings: CliSettings, action, describe, *, changes: bool = True) -> int:
    """Run `action(users, sessions)` against the gateway's Redis; print what it did, or why it could not."""
    status, result = _try_user_action(settings, action, changes=changes)
    if status == 0:
        print(describe(result))
    return status


def _try_user_action(settings: CliSettings, action, *, changes: bool = False) -> tuple[int, object]:
    """The exit status and result of `action(users, sessions)`; on failure, why is printed and the result is None.
    `changes`: the action writes, so a Redis that fails midway may have taken part of it."""
    try:
        return 0, asyncio.run(_with_stores(settings, action))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, None
    except DependencyUnavailable as exc:
        advice = "; the change may be incomplete: run the command again" if changes else ""
        print(f"error: {_redis_trouble(exc)}{advice}", file=sys.stderr)
        return 1, None
    except ValueError as exc:  # REDIS_URL is not a Redis URL
        print(f"error: REDIS_URL: {exc}", file=sys.stderr)
        return 2, None


def _redis_trouble(exc: DependencyUnavailable) -> str:
    """What Redis did, in redis-py's words (a refused connection, a refused password, a bad database number),
    which name its host and port, never the password REDIS_URL may carry."""
    cause = str(exc.__cause__ or "").strip().rstrip(".")
    return f"Redis (REDIS_URL) is unavailable: {cause or 'no answer in time'}"


async def _with_stores(settings: CliSettings, action):
    redis = connect(settings.redis_url, timeout_s=5)
    store_args = {"prefix": settings.redis_prefix, "timeout_s": 5}
    try:
        return await action(RedisUserStore(redis, **store_args), RedisSessionStore(redis, **store_args))
    finally:
        await redis.aclose()


def _read_password(from_stdin: bool, *, confirm: bool = False) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")  # the line end only, a Windows one too (a file saved there)
    try:
        password = _prompt("password: ")
        if confirm and _prompt("again: ") != password:
            _refuse("the passwords differ")
    except EOFError:  # Ctrl-D at the prompt
        _refuse("no password given: type it at the prompt, or pipe it in with --password-stdin")
    return password


def _prompt(prompt: str) -> str:
    """getpass's hidden prompt. Without a terminal (cron, a pipe, ssh without -t) getpass would read standard
    input in plain sight behind a Python warning: refused instead, as --password-stdin is for that."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", getpass.GetPassWarning)  # raised before it prints or reads anything
        try:
            return getpass.getpass(prompt)
        except getpass.GetPassWarning:
            _refuse("no terminal to type the password at: pipe it in with --password-stdin")


def _refuse(message: str) -> NoReturn:
    """Stop on input the user must correct, with the exit status 2 of every other such refusal."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def ingest(settings: CliSettings, *, paths: list[Path]) -> int:
    from cairn.ingest import ingest_paths, named_path_problems

    if problems := named_path_problems(paths):  # a mistake in the command: nothing is sent
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        summary = ingest_paths(
            paths, retrieval_url=settings.url_of("retrieval"), service_token=settings.service_token.get_secret_value()
        )
    except RetrievalUnreachable as exc:
        print(f"error: {exc}: {_not_running_hint(settings, 'retrieval')}", file=sys.stderr)
        return 1
    except NotRetrieval as exc:
        setting = "RETRIEVAL_URL" if settings.retrieval_url else "RETRIEVAL_PORT"
        print(f"error: {exc}: is {setting} right?", file=sys.stderr)
        return 1
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary.describe())
    if summary.interrupted:
        return INTERRUPTED
    return 1 if summary.failed else 0


REQUEST_TIMEOUT_S = 120.0  # the log-in and log-out, and the connection


def ask(settings: CliSettings, *, question: str, username: str, password_stdin: bool, top_k: int | None) -> int:
    if is_blank(question):  # before the password is asked for: the gateway would refuse it anyway
        _refuse("the question is empty")
    kept = None
    if password_stdin:
        password = _read_password(True)
    elif os.environ.get("CAIRN_PASSWORD"):
        password = os.environ["CAIRN_PASSWORD"]
    elif username == demo.DEMO_USER and (kept := demo.kept_demo_password(settings)) is not None:
        password = kept
    else:
        password = _read_password(False)
    url = settings.url_of("gateway")
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        try:
            login = client.post("/auth/login", json={"username": username, "password": password})
            if login.status_code in (404, 405):  # the gateway answers every login otherwise
                setting = "GATEWAY_URL" if settings.gateway_url else "GATEWAY_PORT"
                print(f"login failed: no Cairn gateway at {url}: POST /auth/login answered {login.status_code}: "
                      f"is {setting} right?", file=sys.stderr)
                return 1
            if (session := _answered(login, "token")) is None:
                print(f"login failed: {_message_of(login)}{_stale_demo_hint(login, password, kept)}", file=sys.stderr)
                return 1
            headers = {"Authorization": f"Bearer {session['token']}"}
            request = {"query": question} | ({"top_k": top_k} if top_k is not None else {})  # else DEFAULT_TOP_K
            # No limit of its own on the wait for the answer: the gateway has one (UPSTREAM_TIMEOUT_S, raised with
            # the model's LLM_DEADLINE_S) and answers 504 chat_timeout when it passes.
            try:
                answer = client.post("/api/chat", json=request, headers=headers,
                                     timeout=httpx.Timeout(REQUEST_TIMEOUT_S, read=None))
            finally:
                _log_out(client, headers)
        except httpx.ConnectError as exc:
            print(f"cannot reach Cairn at {url}: {exc}: {_not_running_hint(settings, 'gateway')}", file=sys.stderr)
            return 1
        except httpx.ReadTimeout:
            print(f"no answer from Cairn at {url} within {REQUEST_TIMEOUT_S:g} s", file=sys.stderr)
            return 1
        except httpx.HTTPError as exc:
            print(f"cannot reach Cairn at {url}: {exc}", file=sys.stderr)
            return 1
    if (body := _answered(answer, "answer")) is None:
        print(f"error {answer.status_code}: {_message_of(answer)}", file=sys.stderr)
        return 1
    _print_answer(body)
    return 0


def _stale_demo_hint(login: httpx.Response, password: str, kept: str | None) -> str:
    """For a refused login with the demo password cairn up knows: changed since (POST /auth/password, cairn
    user reset-password), it no longer logs in, and the refusal alone does not say which password was sent."""
    if login.status_code != 401 or password != kept:
        return ""
    return (" (the demo password known to cairn up was refused: if it has changed, give the current one with"
            " CAIRN_PASSWORD or --password-stdin)")


def _log_out(client: httpx.Client, headers: dict[str, str]) -> None:
    """End the command's session, also after a failed or interrupted question: its token leaves with the
    command, and the session would stay among the user's sessions for SESSION_TTL_SECONDS. Best effort."""
    with contextlib.suppress(httpx.HTTPError):
        client.post("/auth/logout", headers=headers)


def _not_running_hint(settings: CliSettings, service: str) -> str:
    """What to do when no connection to `service` could be made."""
    if getattr(settings, f"{service}_url"):
        return f"is {service.upper()}_URL right, and the service running there?"
    return "is Cairn running? start it with `cairn up`, or see `cairn status`"


def _json_object(response: httpx.Response) -> dict | None:
    """The body as a JSON object; None for anything else (a proxy's HTML page, say)."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _answered(response: httpx.Response, field: str) -> dict | None:
    """The JSON object of a 200 answer holding `field`; None for an error or anything else."""
    body = _json_object(response) if response.status_code == 200 else None
    return body if body is not None and body.get(field) is not None else None


def _message_of(response: httpx.Response) -> str:
    """Cairn's error message, else what came instead (a proxy's 502 page, say), cut short; then when to try
    again, for a 429 or 503 whose Retry-After says so."""
    body = _json_object(response)
    if body is not None and isinstance(body.get("message"), str):
        message = body["message"]
    else:
        text = " ".join(response.text.split())[:200]
        message = f"HTTP {response.status_code}" + (f": {text}" if text else "")
    return f"{message} ({when})" if (when := try_again_in(response)) else message


def _print_answer(body: dict) -> None:
    print(body["answer"].strip())
    if body.get("citations"):
        print()
        for citation in body["citations"]:
            where = " > ".join(p for p in (citation.get("title"), citation.get("section")) if p)
            support = (citation.get("support") or {}).get("verdict")
            print(f"[{citation['n']}] {where}  ({citation['doc_id']})" + (f"  {support}" if support else ""))
    confidence = body.get("confidence") or {}
    if confidence:
        print(f"\nconfidence: {confidence.get('level')} — {confidence.get('reason')}")
