from services.analytics.settings import Settings
from shared.logging import configure_logging
from shared.settings import settings_or_exit
from shared.tracing import configure_tracing
from shared.web import serve

settings = settings_or_exit("analytics", Settings)
configure_logging("analytics", settings.log_level)
configure_tracing("analytics")
serve("services.analytics.main:create_app", settings)
