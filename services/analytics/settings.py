from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import NoDecode
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from services.analytics.pricing import ModelPrice, prices_from_text
from shared.replicas import UrlList
from shared.settings import CommonSettings, aliases, unusable_folder
from shared.urls import unset_when_empty


def _database_url(value: str | None) -> str | None:
    """Checked by SQLAlchemy's own parser at start; the message never repeats the value (it holds a password)."""
    if value is None:
        return None
    try:
        make_url(value)
    except ArgumentError:
        raise ValueError("not a SQLAlchemy database URL such as postgresql+psycopg://user:password@host:5432/db") from None
    return value


class Settings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("ANALYTICS_HOST"))
    port: int = Field(8003, validation_alias=aliases("ANALYTICS_PORT"))
    db_url: Annotated[str | None, BeforeValidator(unset_when_empty), AfterValidator(_database_url)] = Field(
        None,
        validation_alias=aliases("ANALYTICS_DB_URL"),
        description="SQLAlchemy URL; default a SQLite file under the data directory. "
        "PostgreSQL: postgresql+psycopg://user:password@host:5432/db",
    )
    db_password: Annotated[SecretStr | None, BeforeValidator(unset_when_empty)] = Field(
        None,
        validation_alias=aliases("ANALYTICS_DB_PASSWORD"),
        description="The database password, taken as it is (no URL escaping); it replaces any password "
        "in ANALYTICS_DB_URL, so the URL can be written without one.",
    )
    db_timeout_s: float = Field(
        5.0, gt=0, validation_alias=aliases("ANALYTICS_DB_TIMEOUT_S"),
        description="Longest wait to connect to the database, for a connection of the pool to come free, "
        "and for a lock another connection holds (not in migrations).",
    )
    statement_timeout_s: float = Field(
        30.0, gt=0, validation_alias=aliases("ANALYTICS_STATEMENT_TIMEOUT_S"),
        description="Longest one SQL statement of a report or of the consumer may run before the database "
        "cancels it (not in migrations); the report then answers 503 and the consumer retries its events.",
    )
    db_pool_size: int = Field(5, ge=1, le=1000, validation_alias=aliases("ANALYTICS_DB_POOL_SIZE"))
    db_max_overflow: int = Field(
        10, ge=0, le=1000, validation_alias=aliases("ANALYTICS_DB_MAX_OVERFLOW"),
        description="Connections opened beyond ANALYTICS_DB_POOL_SIZE when all of the pool's are in use.",
    )
    max_exports: int = Field(
        4, ge=1, le=1000, validation_alias=aliases("ANALYTICS_MAX_EXPORTS"),
        description="Most CSV exports streamed at once: each holds a database connection until it ends, "
        "so without a limit slow downloads would leave none for the reports and the consumer.",
    )
    prefetch: int = Field(200, ge=1, le=65535, validation_alias=aliases("ANALYTICS_PREFETCH"))
    batch_size: int = Field(
        100, ge=1, le=1000, validation_alias=aliases("ANALYTICS_BATCH_SIZE"),
        description="Most events committed in one transaction; a batch never holds more than the prefetch, "
        "since the broker sends no more unacknowledged messages than that.",
    )
    batch_wait_ms: float = Field(
        5.0, ge=0, le=1000, validation_alias=aliases("ANALYTICS_BATCH_WAIT_MS"),
        description="How long the consumer waits for more messages to fill a batch; no message is held "
        "longer than this before its batch is stored.",
    )
    retrieval_urls: UrlList = Field(
        ("http://127.0.0.1:8002",),
        validation_alias=aliases("RETRIEVAL_URLS", "RETRIEVAL_URL"),
        description="Retrieval's API, asked for its document list by the never-cited report (the first replica that "
        "answers, in order).",
    )
    retrieval_timeout_s: float = Field(
        5.0, gt=0, validation_alias=aliases("ANALYTICS_RETRIEVAL_TIMEOUT_S")
    )
    model_prices: Annotated[dict[str, ModelPrice], NoDecode, BeforeValidator(prices_from_text)] = Field(
        {}, validation_alias=aliases("MODEL_PRICES"),
        description='US dollars per million tokens by model, as JSON: {"gpt-4o": {"input": 2.5, "output": 10}}; '
        "the models report gives each priced model's cost (the built-in offline model costs 0).",
    )

    @model_validator(mode="after")
    def _password_has_a_database(self) -> "Settings":
        if self.db_password is not None and self.db_url is None:
            raise ValueError("ANALYTICS_DB_PASSWORD is set but ANALYTICS_DB_URL is not: name the database it is for")
        return self

    @model_validator(mode="after")
    def _exports_leave_connections(self) -> "Settings":
        connections = self.db_pool_size + self.db_max_overflow
        if self.max_exports >= connections:
            raise ValueError(
                f"ANALYTICS_MAX_EXPORTS ({self.max_exports}) must be below ANALYTICS_DB_POOL_SIZE + "
                f"ANALYTICS_DB_MAX_OVERFLOW ({connections}): exports would leave the reports no connection"
            )
        return self

    @model_validator(mode="after")
    def _database_folder_usable(self) -> "Settings":
        variable, folder = self._database_folder()
        if folder is not None and (problem := unusable_folder(folder)):
            raise ValueError(f"{variable}: {problem}")
        return self

    def _database_folder(self) -> tuple[str, Path | None]:
        """The folder of a SQLite database file, which analytics creates when missing; none for a server."""
        if self.db_url is None:
            return "CAIRN_DATA_DIR", self.data_dir
        url = make_url(self.db_url)
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return "ANALYTICS_DB_URL", None
        return "ANALYTICS_DB_URL", Path(url.database).parent

    @property
    def retrieval_url(self) -> str:
        return self.retrieval_urls[0]

    @property
    def database_url(self) -> str:
        if self.db_url is None:
            return f"sqlite:///{(self.data_dir / 'analytics.db').resolve()}"
        if self.db_password is None:
            return self.db_url
        # Set on SQLAlchemy's URL object, which escapes it when rendered: any character may be in it.
        url = make_url(self.db_url).set(password=self.db_password.get_secret_value())
        return url.render_as_string(hide_password=False)
