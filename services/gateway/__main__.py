from services.gateway.settings import Settings
from shared.logging import configure_logging
from shared.settings import settings_or_exit
from shared.tracing import configure_tracing
from shared.web import PUBLIC_KEEP_ALIVE_S, serve

settings = settings_or_exit("gateway", Settings)
configure_logging("gateway", settings.log_level)
configure_tracing("gateway")
serve("services.gateway.main:create_app", settings, keep_alive_s=PUBLIC_KEEP_ALIVE_S)
