"""URL settings, checked when a service starts by pydantic's URL types and kept as they were given.

Without the check a URL with a typo (no scheme, a space, a port that is not a number) lets a service
start and report ready, then fails every request that uses it with an error that names no setting.
Error messages never repeat the value: Redis and RabbitMQ URLs carry passwords.
"""
from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, AmqpDsn, AnyHttpUrl, BeforeValidator, RedisDsn, TypeAdapter, ValidationError

_HTTP = TypeAdapter(AnyHttpUrl)
_AMQP = TypeAdapter(AmqpDsn)
_REDIS = TypeAdapter(RedisDsn)


def checked_http_url(value: str) -> str:
    return _checked(_HTTP, value, "an http(s) URL such as http://host:port")


def _checked_amqp_url(value: str) -> str:
    return _checked(_AMQP, value, "an amqp(s) URL such as amqp://user:password@host:5672/")


def _checked_redis_url(value: str) -> str:
    if value.startswith("unix://"):  # a socket path: redis-py reads it, pydantic's RedisDsn has no such scheme
        return value
    return _checked(_REDIS, value, "a redis(s) URL such as redis://host:6379/0")


def _checked(adapter: TypeAdapter, value: str, expected: str) -> str:
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Input should be a valid URL, ")
        raise ValueError(f"not {expected}: {reason}") from None
    if any(c.isspace() for c in value.strip()):  # the parser would quietly percent-encode it into the path
        raise ValueError(f"not {expected}: it contains a space")
    return value


def unset_when_empty(value: object) -> object:
    """An empty variable (a ConfigMap's `LLM_BASE_URL: ""`, `RERANK_MODEL=` in a .env file) means the setting is
    not set: as a URL it is no address, as a path it would be "." (the working folder)."""
    return None if isinstance(value, str) and not value.strip() else value


def _first_listed(value: object) -> object:
    """The first of a comma-separated list of replica URLs (`CHAT_URL=http://a:1,http://b:1`), None for none."""
    if not isinstance(value, str):
        return value
    listed = [part.strip().rstrip("/") for part in value.split(",") if part.strip()]
    return listed[0] if listed else None


def _checked_if_set(value: str | None) -> str | None:
    return None if value is None else checked_http_url(value)


def _checked_model_url_if_set(value: str | None) -> str | None:
    """A model endpoint's URL: a user name or password in it would be written wherever the URL is (the start-up
    log line), and the OpenAI SDK sends the API key beside it, which its transport refuses on every call."""
    value = _checked_if_set(value)
    if value is not None and "@" in urlsplit(value).netloc:
        raise ValueError("the URL must not hold a user name or password: give the key in LLM_API_KEY")
    return value


HttpUrl = Annotated[str, AfterValidator(checked_http_url)]
OptionalHttpUrl = Annotated[str | None, BeforeValidator(unset_when_empty), AfterValidator(_checked_if_set)]
OptionalModelUrl = Annotated[str | None, BeforeValidator(unset_when_empty), AfterValidator(_checked_model_url_if_set)]
FirstListedHttpUrl = Annotated[str | None, BeforeValidator(_first_listed), AfterValidator(_checked_if_set)]
AmqpUrl = Annotated[str, AfterValidator(_checked_amqp_url)]
RedisUrl = Annotated[str, AfterValidator(_checked_redis_url)]
