"""`python -m services.chat.offline_llm`: the offline generator on OFFLINE_LLM_PORT (default 8004)."""
from services.chat.offline_llm.settings import OfflineSettings
from shared.logging import configure_logging
from shared.settings import settings_or_exit
from shared.web import serve

if __name__ == "__main__":
    settings = settings_or_exit("offline-llm", OfflineSettings)
    configure_logging("offline-llm", settings.log_level)
    serve("services.chat.offline_llm.app:create_app", settings)
