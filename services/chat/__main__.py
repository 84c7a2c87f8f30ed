"""`python -m services.chat`: the chat service on CHAT_HOST:CHAT_PORT (default 127.0.0.1:8001)."""
from services.chat.settings import Settings
from shared.logging import configure_logging
from shared.settings import settings_or_exit
from shared.tracing import configure_tracing
from shared.web import serve

if __name__ == "__main__":
    settings = settings_or_exit("chat", Settings)
    configure_logging("chat", settings.log_level)
    configure_tracing("chat")
    serve("services.chat.main:create_app", settings)
