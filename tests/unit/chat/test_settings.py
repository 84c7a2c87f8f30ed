import pytest
from pydantic import ValidationError

from services.chat.settings import OFFLINE_MODEL, Settings

pytestmark = pytest.mark.unit


def test_defaults_use_the_offline_generator(monkeypatch):
    for name in ("LLM_BASE_URL", "LLM_MODEL", "CHAT_MODELS", "CHAT_PORT"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.offline and settings.llm_model == OFFLINE_MODEL
    assert settings.chat_models == [OFFLINE_MODEL]
    assert (settings.host, settings.port, settings.default_top_k) == ("127.0.0.1", 8001, 8)


@pytest.mark.parametrize("raw", ["a, b", '["a", "b"]'])
def test_chat_models_accept_a_comma_list_or_json(monkeypatch, raw):
    monkeypatch.setenv("CHAT_MODELS", raw)
    monkeypatch.setenv("LLM_MODEL", "a")
    monkeypatch.setenv("LLM_BASE_URL", "http://llm.test/v1")
    settings = Settings()
    assert settings.chat_models == ["a", "b"] and not settings.offline


def test_the_default_model_is_always_allowed(monkeypatch):
    monkeypatch.setenv("CHAT_MODELS", "b")
    monkeypatch.delenv("LLM_MODEL", raising=False)
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    assert Settings().chat_models == [OFFLINE_MODEL, "b"]


def test_an_external_endpoint_needs_a_model_name(monkeypatch):
    monkeypatch.setenv("LLM_BASE_URL", "http://llm.test/v1")
    monkeypatch.delenv("LLM_MODEL", raising=False)
    with pytest.raises(ValidationError, match="LLM_MODEL"):
        Settings()


def test_port_comes_from_chat_port(monkeypatch):
    monkeypatch.setenv("CHAT_PORT", "9101")
    assert Settings().port == 9101
