"""Chat's named errors (mapped to JSON by shared.web like every ServiceError)."""
from __future__ import annotations

from shared.errors import DependencyUnavailable, NotFound, ServiceError


class UnknownModel(ServiceError):
    status_code = 422
    code = "unknown_model"

    def __init__(self, model: str, allowed: list[str]) -> None:
        super().__init__(f"model {model!r} is not offered; choose one of: {', '.join(allowed)}")


class LLMUnavailable(DependencyUnavailable):
    """The model endpoint failed, after the retries of adapters/llm_retry.py: 502 {"error": "llm_unavailable"}."""

    status_code = 502

    def __init__(self, message: str | None = None) -> None:
        super().__init__("llm", message)


class ConversationNotFound(NotFound):
    """The conversation_id is unknown to this user (it may belong to someone else): 404."""

    code = "conversation_not_found"

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"conversation {conversation_id!r} was not found")
