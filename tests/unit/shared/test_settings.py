"""Where every service's settings come from: their documented environment variables only."""
import pytest

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
