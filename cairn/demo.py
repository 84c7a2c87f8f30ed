"""First-run set-up for `cairn up`: the demo collection (docs/) and the demo user."""
from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import httpx

from cairn.ingest import ingest_paths
from cairn.settings import CliSettings
from services.gateway.adapters.redis_store import RedisSessionStore, RedisUserStore, connect
from services.gateway.passwords import verify_password
from services.gateway.users import ensure_user, reset_password

DEMO_USER = "demo"
DEMO_ROLES = ["user", "analyst", "admin"]
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"
PASSWORD_FILE = "demo-password"  # in the data directory: the password generated on the first run
SET_UP_MARKER = "demo-password-configured"  # in the data directory: a run set the password from CAIRN_DEMO_PASSWORD


def kept_demo_password(settings: CliSettings) -> str | None:
    """CAIRN_DEMO_PASSWORD, else the password `cairn up` generated and keeps in the data directory; None
    when there is neither. Reads only: `cairn ask` uses it."""
    if settings.demo_password:
        return settings.demo_password
    saved = settings.data_dir / PASSWORD_FILE
    return saved.read_text().strip() if saved.exists() else None


def create_demo_user(settings: CliSettings) -> str | None:
    """The demo user's password: the user is created with it when missing, and given it when it is
    configured or new (a new data directory beside a Redis that kept the user). Otherwise the user is left
    as an administrator made it, enabled or not, with its roles and password; None when the password
    shown would not log in, or is not known here (an earlier run's CAIRN_DEMO_PASSWORD)."""
    return asyncio.run(_ensure_demo_user(settings))


async def _ensure_demo_user(settings: CliSettings) -> str | None:
    redis = connect(settings.redis_url, timeout_s=5)
    store_args = {"prefix": settings.redis_prefix, "timeout_s": 5}
    try:
        users = RedisUserStore(redis, **store_args)
        password, owned = _demo_password(settings, exists=await users.get(DEMO_USER) is not None)
        if password is None:
            return None
        user = await ensure_user(users=users, username=DEMO_USER, password=password, roles=DEMO_ROLES)
        opens = await asyncio.to_thread(verify_password, user.password_hash, password)
        if owned and not opens:
            sessions = RedisSessionStore(redis, **store_args)
            user = (await reset_password(users=users, sessions=sessions, username=DEMO_USER, password=password)).user
            opens = True
    finally:
        await redis.aclose()
    return password if opens and not user.disabled else None


def _demo_password(settings: CliSettings, *, exists: bool) -> tuple[str | None, bool]:
    """The password to show, and whether it is to be the demo user's now: CAIRN_DEMO_PASSWORD (yes); the
    one kept in the data directory (no); none, when an earlier run set the user up from CAIRN_DEMO_PASSWORD
    and the user is still there; else a new one, kept (yes: a new data directory, or a Redis that lost it)."""
    marker = settings.data_dir / SET_UP_MARKER
    if settings.demo_password:
        _write_private(marker, "the demo user's password came from CAIRN_DEMO_PASSWORD\n")
        return settings.demo_password, True
    if (kept := kept_demo_password(settings)) is not None:
        return kept, False
    if marker.exists() and exists:
        return None, False
    password = secrets.token_urlsafe(12)
    _write_private(settings.data_dir / PASSWORD_FILE, password + "\n")
    return password, True


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)


def collection_is_empty(settings: CliSettings) -> bool:
    response = httpx.get(
        f"{settings.local_url_of('retrieval')}/documents",
        params={"limit": 1},
        headers={"X-Service-Token": settings.service_token.get_secret_value()},
        timeout=30,
    )
    response.raise_for_status()
    return not response.json()["documents"]


def ingest_docs(settings: CliSettings) -> None:
    summary = ingest_paths(
        [DOCS_DIR],
        retrieval_url=settings.local_url_of("retrieval"),
        service_token=settings.service_token.get_secret_value(),
        base=DOCS_DIR.parent,
    )
    if summary.failed:
        print(f"warning: {summary.failed} demo document(s) failed: {', '.join(summary.failed_names)}")
