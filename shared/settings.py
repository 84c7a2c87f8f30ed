"""Settings base shared by every service: environment variables first, defaults that work on one machine."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.urls import AmqpUrl, unset_when_empty
from shared.validation_errors import one_line

PLACEHOLDER_SERVICE_TOKEN = "change-me-internal-service-token"


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def aliases(*names: str) -> AliasChoices:
    """The environment variable name(s) of a field. Code may also pass the field by its own name."""
    if not all(name.isupper() for name in names):
        raise ValueError(f"environment variable names are upper case: {names}")  # "port" would read PORT
    return AliasChoices(*names)


class CommonSettings(BaseSettings):
    # populate_by_name lets code and tests pass a field by its own name, but pydantic-settings then also
    # reads the field's name from the environment (prefixed with env_prefix): ENV, HOST, PORT or DATA_DIR,
    # set by a platform or an image for something else, would configure Cairn. The prefix keeps those
    # names out; every setting is read from its documented variables only.
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, env_prefix="CAIRN_FIELD_")

    env: Literal["local", "test", "production"] = Field("local", validation_alias=aliases("CAIRN_ENV"))
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)] = Field(
        "INFO", validation_alias=aliases("LOG_LEVEL")
    )
    service_token: SecretStr = Field(
        SecretStr(PLACEHOLDER_SERVICE_TOKEN),
        validation_alias=aliases("CAIRN_SERVICE_TOKEN"),
        description="Shared secret the gateway sends to internal services.",
    )
    amqp_url: AmqpUrl = Field("amqp://guest:guest@127.0.0.1:5672/", validation_alias=aliases("AMQP_URL"))
    # Not empty: RabbitMQ's default exchange refuses these publishes, and events would wait forever.
    events_exchange: str = Field("cairn.events", min_length=1, validation_alias=aliases("EVENTS_EXCHANGE"))
    analytics_queue: str = Field("cairn.analytics", min_length=1, validation_alias=aliases("ANALYTICS_QUEUE"))
    data_dir: Path = Field(Path("data"), validation_alias=aliases("CAIRN_DATA_DIR"))
    outbox_path: Annotated[Path | None, BeforeValidator(unset_when_empty)] = Field(
        None,
        validation_alias=aliases("OUTBOX_PATH"),
        description="SQLite file holding events until the broker confirms them; default "
        "CAIRN_DATA_DIR/outbox/<service>.sqlite3. Each process needs its own file.",
    )
    events_linger_s: float = Field(
        1.0,
        ge=0,
        le=60,
        validation_alias=aliases("EVENTS_LINGER_S"),
        description="Longest an event waits in the outbox for others before a batch is sent; 0 sends each at once.",
    )
    outbox_max_events: int = Field(
        100_000,
        ge=1,
        validation_alias=aliases("OUTBOX_MAX_EVENTS"),
        description="Most events the outbox holds; beyond it new events are refused and counted as dropped.",
    )
    sse_keepalive_s: float = Field(
        15.0,
        gt=0,
        le=300,
        validation_alias=aliases("SSE_KEEPALIVE_S"),
        description="Seconds of silence in a streamed answer after which chat and the gateway send a "
        "keep-alive comment, so proxies do not close it while the model is still reading.",
    )
    host: str = "127.0.0.1"
    port: int = 0

    def outbox_file(self, service: str) -> Path:
        return self.outbox_path or self.data_dir / "outbox" / f"{service}.sqlite3"

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> "CommonSettings":
        if self.env != "local" and self.service_token.get_secret_value() == PLACEHOLDER_SERVICE_TOKEN:
            raise ValueError("CAIRN_SERVICE_TOKEN is the placeholder; set a real secret outside CAIRN_ENV=local")
        return self


def unusable_folder(path: Path) -> str | None:
    """Why the service could not create and write files in the folder `path` (made when missing), or None.
    Checked with the settings, so a bad folder stops the start naming its variable, instead of a traceback
    or a store that retries forever. The reason never repeats the path: messages show no setting's value."""
    existing = path.absolute()
    while not os.path.exists(existing):  # os.path.exists: False, not an error, under an unreadable folder
        existing = existing.parent
    if not existing.is_dir():
        return "a file stands where a folder is needed" if existing == path.absolute() else "a part of the path is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "the folder is not writable by this user"
    return None


SettingsT = TypeVar("SettingsT", bound=CommonSettings)


def settings_or_exit(service: str, settings_class: type[SettingsT]) -> SettingsT:
    """The service's settings from the environment. Invalid ones end the process with exit code 2 after one
    line per problem on stderr (see print_settings_problems)."""
    try:
        return settings_class()
    except ValidationError as exc:
        print_settings_problems(exc, prefix=f"{service}: cannot start: ")
        raise SystemExit(2) from None


def print_settings_problems(exc: ValidationError, *, prefix: str) -> None:
    """One line on stderr per invalid setting, naming its variable but never a value: the input of a
    cross-field check is every setting, secrets included."""
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        print(f"{prefix}{one_line(error)}", file=sys.stderr)  # where: the variable; none for a cross-field check
