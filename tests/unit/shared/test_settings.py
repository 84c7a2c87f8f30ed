"""Where every service's settings come from: their documented environment variables only."""
import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from cairn.settings import CliSettings
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.offline_llm.settings import OfflineSettings
from services.chat.settings import Settings as ChatSettings
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.settings import Settings as RetrievalSettings
from shared.settings import aliases

pytestmark = pytest.mark.unit

ALL = [GatewaySettings, ChatSettings, RetrievalSettings, AnalyticsSettings, OfflineSettings, CliSettings]


@pytest.mark.parametrize("settings_class", ALL, ids=lambda c: c.__module__)
def test_generic_variables_set_for_something_else_change_nothing(settings_class, monkeypatch):
    # Platforms and images set these for their own purposes (Cloud Run sets PORT, many images ENV).
    defaults = settings_class()
    for name in ("ENV", "PORT", "HOST", "DATA_DIR", "SERVICE_TOKEN", "RETRIEVAL_URL_X"):
        monkeypatch.setenv(name, "1" if name == "PORT" else "staging")
    for field, info in settings_class.model_fields.items():  # a field's own name, where it is not its variable's
        if info.validation_alias is None or field.upper() not in info.validation_alias.choices:
            monkeypatch.setenv(field, "1")
    assert settings_class() == defaults


def test_each_setting_still_comes_from_its_own_variable_and_code_may_pass_it_by_name(monkeypatch):
    monkeypatch.setenv("GATEWAY_PORT", "8123")
    monkeypatch.setenv("CAIRN_DATA_DIR", "/srv/cairn")
    settings = GatewaySettings()
    assert (settings.port, str(settings.data_dir)) == (8123, "/srv/cairn")
    assert GatewaySettings(port=1).port == 1


def test_a_field_name_cannot_be_made_an_environment_name_by_mistake():
    with pytest.raises(ValueError, match="upper case"):
        aliases("GATEWAY_PORT", "port")


@pytest.mark.parametrize(
    ("settings_class", "variable", "value", "reason"),
    [
        (GatewaySettings, "CHAT_URLS", "http://127.0.0.1:8001 http://127.0.0.1:8011", "invalid port number"),
        (GatewaySettings, "ANALYTICS_URL", "127.0.0.1:8003", "relative URL without a base"),
        (GatewaySettings, "REDIS_URL", "redis://:secret@127.0.0.1:63x9/0", "invalid port number"),
        (GatewaySettings, "UPSTREAM_TIMEOUT_S", "0", "greater than 0"),
        (GatewaySettings, "MAX_UPLOAD_BYTES", "0", "greater than or equal to 1"),  # retrieval refused 0 already
        (GatewaySettings, "LOG_LEVEL", "verbose", "'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL'"),
        (ChatSettings, "LLM_BASE_URL", "api.example.com/v1", "relative URL without a base"),
        # It would be written into the start-up log line; the SDK's transport refuses it beside the API key.
        (ChatSettings, "LLM_BASE_URL", "https://cairn:secret@llm.internal/v1", "give the key in LLM_API_KEY"),
        (RetrievalSettings, "LLM_BASE_URL", "https://cairn:secret@llm.internal/v1", "give the key in LLM_API_KEY"),
        (ChatSettings, "RETRIEVAL_URLS", "http://retrieval:80x2", "invalid port number"),
        (ChatSettings, "AMQP_URL", "amqp//guest:secret@127.0.0.1:5672/", "relative URL without a base"),
        (ChatSettings, "EVENTS_EXCHANGE", "", "at least 1 character"),
        (ChatSettings, "SSE_KEEPALIVE_S", "0", "greater than 0"),  # a beat with no pause between beats
        (RetrievalSettings, "CHROMA_URL", "chroma.internal:8000", "scheme should be"),
        (CliSettings, "GATEWAY_URL", "https://cairn example.com", "invalid international domain name"),
    ],
)
def test_a_malformed_value_stops_the_service_at_start_naming_the_variable_not_the_value(
    settings_class, variable, value, reason, monkeypatch
):
    # Before, each of these started and reported ready, then failed every request that used it.
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        settings_class()
    (error,) = caught.value.errors(include_input=False)
    assert error["loc"] == (variable,) and reason in error["msg"]
    assert "secret" not in str(error["msg"])


def test_good_values_pass_as_given_and_empty_optional_urls_mean_unset(monkeypatch):
    monkeypatch.setenv("LOG_LEVEL", "debug")
    monkeypatch.setenv("REDIS_URL", "unix:///run/redis.sock")
    monkeypatch.setenv("LLM_BASE_URL", "")  # as a ConfigMap leaves it
    chat = ChatSettings()
    assert (chat.log_level, chat.redis_url, chat.llm_base_url, chat.offline) == (
        "DEBUG", "unix:///run/redis.sock", None, True
    )
    monkeypatch.setenv("CHROMA_URL", "http://chroma:8000")
    assert RetrievalSettings().chroma_url == "http://chroma:8000"


@pytest.mark.parametrize("settings_class", [ChatSettings, GatewaySettings])
def test_an_empty_outbox_path_means_the_default_file(settings_class, monkeypatch):
    """`OUTBOX_PATH=` was the path ".", the working folder, which no SQLite file can be: every event was kept
    in memory only, and lost at the next stop while RabbitMQ was down."""
    monkeypatch.setenv("OUTBOX_PATH", "")
    settings = settings_class()
    assert settings.outbox_path is None
    assert settings.outbox_file("chat") == settings.data_dir / "outbox" / "chat.sqlite3"


def test_the_cli_talks_to_the_first_replica_of_a_list(monkeypatch):
    monkeypatch.setenv("RETRIEVAL_URL", "http://10.0.0.5:8002/, http://10.0.0.6:8002")
    monkeypatch.setenv("CHAT_URL", "")
    settings = CliSettings()
    assert settings.url_of("retrieval") == "http://10.0.0.5:8002"
    assert settings.url_of("chat") == f"http://127.0.0.1:{settings.chat_port}"


@pytest.mark.parametrize("variable", ["RERANK_MODEL", "EMBEDDING_MODEL_PATH"])
def test_a_model_folder_that_is_not_there_is_named_at_start(variable, tmp_path, monkeypatch):
    monkeypatch.setenv(variable, str(tmp_path / "missing"))
    with pytest.raises(ValidationError) as caught:
        RetrievalSettings()
    (error,) = caught.value.errors(include_input=False)
    assert error["loc"] == (variable,) and "directory" in error["msg"]


def test_a_database_url_sqlalchemy_cannot_read_is_named_at_start(monkeypatch):
    monkeypatch.setenv("ANALYTICS_DB_URL", "notaurl")
    with pytest.raises(ValidationError) as caught:
        AnalyticsSettings()
    (error,) = caught.value.errors(include_input=False)
    assert error["loc"] == ("ANALYTICS_DB_URL",) and "not a SQLAlchemy database URL" in error["msg"]
    monkeypatch.setenv("ANALYTICS_DB_URL", "postgresql+psycopg://cairn:secret@db:5432/analytics")
    assert AnalyticsSettings().db_url == "postgresql+psycopg://cairn:secret@db:5432/analytics"


def test_an_empty_database_url_means_the_default_sqlite_file(monkeypatch, tmp_path):
    # As with CHROMA_URL: an empty variable (ANALYTICS_DB_URL= in a .env file or a bench run) is unset.
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ANALYTICS_DB_URL", "")
    monkeypatch.setenv("ANALYTICS_DB_PASSWORD", "")
    settings = AnalyticsSettings()
    assert settings.db_url is None and settings.db_password is None
    assert settings.database_url == f"sqlite:///{(tmp_path / 'analytics.db').resolve()}"


def test_a_database_password_is_taken_as_it_is_and_replaces_the_urls(monkeypatch):
    password = "p@ss:w/rd#x%2F?y=1&z $dollar"
    monkeypatch.setenv("ANALYTICS_DB_URL", "postgresql+psycopg://cairn:old@db:5432/analytics?sslmode=require")
    monkeypatch.setenv("ANALYTICS_DB_PASSWORD", password)
    settings = AnalyticsSettings()
    url = make_url(settings.database_url)
    assert (url.username, url.password, url.host, url.port, url.database) == ("cairn", password, "db", 5432, "analytics")
    assert url.query == {"sslmode": "require"}
    assert password not in repr(settings)


def test_a_database_password_without_a_database_url_is_refused_at_start(monkeypatch):
    monkeypatch.delenv("ANALYTICS_DB_URL", raising=False)
    monkeypatch.setenv("ANALYTICS_DB_PASSWORD", "secret")
    with pytest.raises(ValidationError) as caught:
        AnalyticsSettings()
    (error,) = caught.value.errors(include_input=False)
    assert "ANALYTICS_DB_PASSWORD" in error["msg"] and "ANALYTICS_DB_URL" in error["msg"]
