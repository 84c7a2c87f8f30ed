from services.gateway.settings import Settings
from shared.logging import configure_logging
from shared.web import serve

settings = Settings()
configure_logging("gateway", settings.log_level)
serve("services.gateway.main:create_app", settings)
