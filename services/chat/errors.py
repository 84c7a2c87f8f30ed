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


class LLMRetryLater(LLMUnavailable):
    """The model endpoint still answered 429 (or a 5xx with a Retry-After) after the retries, or chat's circuit
    breaker for it is open: 503 llm_unavailable with a Retry-After (the endpoint's own, or the breaker's time
    until its trial), as the same question may well be answered after that wait."""

    status_code = 503

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        if retry_after is not None:
            self.retry_after = str(retry_after)


class LLMContextExceeded(LLMUnavailable):
    """The prompt does not fit the model's context window even after chat cut the passages down: 500
    llm_context_exceeded. The question is fine and the model is up; the configuration is what is wrong."""

    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = "llm_context_exceeded"


class LLMContentFiltered(LLMUnavailable):
    """The model endpoint's content filter refused the prompt (Azure OpenAI's 400 "content_filter"): 422
    llm_content_filtered. The model is up, and the same question would be refused again; another wording may not."""

    status_code = 422

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = "llm_content_filtered"


class ConversationNotFound(NotFound):
    """The conversation_id is unknown to this user (it may belong to someone else): 404."""

    code = "conversation_not_found"

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"conversation {conversation_id!r} was not found")
