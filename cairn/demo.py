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


def demo_password(settings: CliSettings) -> tuple[str, bool]:
    """CAIRN_DEMO_PASSWORD, else the one generated on the first run and kept in the data directory; and
    whether it is to be the demo user's now (configured, or generated on this run for a new data directory)."""
    if settings.demo_password:
        return settings.demo_password, True
    saved = settings.data_dir / "demo-password"
    if saved.exists():
        return saved.read_text().strip(), False
    password = secrets.token_urlsafe(12)
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.touch(mode=0o600)
    saved.write_text(password + "\n")
    return password, True


def create_demo_user(settings: CliSettings) -> str | None:
    """The demo user's password: the user is created with it when missing, and given it when it is
    configured or new (a new data directory beside a Redis that kept the user). Otherwise the user is left
    as an administrator made it, enabled or not, with its roles and password; None when the password
    shown would not log in."""
    password, owned = demo_password(settings)

    async def ensure() -> bool:
        redis = connect(settings.redis_url, timeout_s=5)
        store_args = {"prefix": settings.redis_prefix, "timeout_s": 5}
        try:
            users = RedisUserStore(redis, **store_args)
            user = await ensure_user(users=users, username=DEMO_USER, password=password, roles=DEMO_ROLES)
            opens = await asyncio.to_thread(verify_password, user.password_hash, password)
            if owned and not opens:
                sessions = RedisSessionStore(redis, **store_args)
                user = (await reset_password(users=users, sessions=sessions, username=DEMO_USER, password=password)).user
                opens = True
        finally:
            await redis.aclose()
        return opens and not user.disabled

    return password if asyncio.run(ensure()) else None


def collection_is_empty(settings: CliSettings) -> bool:
    response = httpx.get(
        f"{settings.local_url_of('retrieval')}/documents",
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
