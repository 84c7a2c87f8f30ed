"""Chat's metrics: pipeline stage latencies, LLM tokens and retries, circuit-breaker states, failed streams."""
from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from shared import metrics as shared_metrics
from shared.metrics import STAGE_BUCKETS

if TYPE_CHECKING:
    from services.chat.models import Timings
    from services.chat.ports import Generation

STAGE_SECONDS = Histogram(
    "cairn_chat_stage_seconds",
    "Duration of one chat stage: reformulation, retrieval, generation, citations (with grounding), total",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
LLM_TOKENS = Counter("cairn_llm_tokens_total", "Tokens the model reported, by model and kind", ["model", "kind"])
LLM_RETRIES = Counter(
    "cairn_llm_retries_total", "Calls to the model endpoint retried, by the failure (HTTP status or error)", ["reason"]
)
BREAKER_STATE = Gauge(
    "cairn_circuit_breaker_state", "Circuit-breaker state: 0 closed, 1 half-open, 2 open", ["breaker"]
)

BREAKER_VALUES = {"closed": 0, "half_open": 1, "open": 2}
# timings_ms field -> stage label; citations and total are measured on every turn.
_STAGES = {"reformulate": "reformulation", "retrieval": "retrieval", "generation": "generation"}

for _stage in ("reformulation", "retrieval", "generation", "citations", "total"):
    STAGE_SECONDS.labels(_stage)


def observe_turn(timings: Timings) -> None:
    """A finished turn's stage timings; a stage that did not run (0 ms: small talk, no reformulation,
    nothing relevant to ask the model about) is not observed."""
    for field, stage in _STAGES.items():
        if milliseconds := getattr(timings, field):
            STAGE_SECONDS.labels(stage).observe(milliseconds / 1000)
    STAGE_SECONDS.labels("citations").observe(timings.citations / 1000)
    STAGE_SECONDS.labels("total").observe(timings.total / 1000)


def count_tokens(model: str, generation: Generation) -> None:
    """Under the model asked for, from the allow-list: the name an endpoint answers with may be any
    (a dated snapshot, a provider's prefix), and each would be a series of its own."""
    LLM_TOKENS.labels(model, "prompt").inc(generation.prompt_tokens)
    LLM_TOKENS.labels(model, "completion").inc(generation.completion_tokens)


def count_retry(reason: str) -> None:
    LLM_RETRIES.labels(reason).inc()


def breaker_state(name: str, state: str) -> None:
    BREAKER_STATE.labels(name).set(BREAKER_VALUES[state])


def count_stream_failure(reason: str) -> None:
    """A POST /chat/stream that ended in an `error` event, `reason` its error code."""
    shared_metrics.count_stream_failure(service="chat", route="/chat/stream", reason=reason)
