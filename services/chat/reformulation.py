"""Question rewriting before retrieval: the rule-based follow-up resolver, and the LLM rewriter that
falls back to it whenever the model fails or answers something unusable."""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Literal

from services.chat.errors import LLMUnavailable
from services.chat.followups import is_follow_up, rewrite_against
from services.chat.models import MAX_QUERY_CHARS
from services.chat.ports import Exchange, Generator, Reformulator
from services.chat.prompts import fenced, read_template
from services.chat.settings import Settings
from shared.reasoning import without_reasoning

log = logging.getLogger(__name__)

CONVERSATION_SLOT = "{conversation}"
CONVERSATION_TAG = "conversation"
ANSWER_CHARS = 300  # enough of an answer to name what it was about
MIN_REWRITE_LIMIT = 300  # a rewrite longer than this and than twice the question is the model rambling
# Also in bold, as Markdown models write it: "**Rewritten query:**", "**Rewritten query**:".
LABEL = re.compile(
    r"^(\*\*)?(?:standalone|rewritten|reformulated)?\s*(?:question|query)?\s*(?(1)(?:\*\*)?)\s*:\s*(?(1)(?:\*\*)?)\s*",
    re.IGNORECASE,
)
BULLET = re.compile(r"^[-*>]+(?:\s+|$)")
# The opening or closing line of a Markdown code block ("```", "```text", "~~~"): some models fence their reply.
FENCE = re.compile(r"^(?:`{3,}|~{3,})[^`]*$")
QUOTES = "\"'`“”‘’«»"
QUESTION_MARKS = ("?", "？", "؟")  # the prompt asks for a rewrite in the question's language: Chinese, Arabic, ...
FULL_STOPS = (".", "。")
BOLD = "**"

Mode = Literal["followups", "always"]


class HeuristicReformulator:
    """Resolves follow-ups by rule (services.chat.followups); leaves other questions, typos included, alone."""

    async def reformulate(self, *, query: str, history: list[Exchange], model: str) -> str:
        if not is_follow_up(query, history):
            return query
        rewritten = rewrite_against(query, history)
        # Retrieval refuses a longer query: the question as typed beats a failed search.
        return rewritten if len(rewritten) <= MAX_QUERY_CHARS else query


class LLMReformulator:
    """Asks the chat model for a standalone question: with mode "followups" only when there is history,
    with "always" for every question (which also fixes typos)."""

    def __init__(
        self, generator: Generator, *, mode: Mode, max_history_turns: int = 3, temperature: float = 0,
        max_tokens: int = 96, timeout_s: float = 10.0,
    ) -> None:
        if mode not in ("followups", "always"):
            raise ValueError(f"mode must be 'followups' or 'always', got {mode!r}")
        if max_history_turns < 1 or max_tokens < 1:
            raise ValueError("max_history_turns and max_tokens must be at least 1")
        self._generator = generator
        self._mode = mode
        self._max_history_turns = max_history_turns
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s  # a rewrite is a nicety: past this, the heuristic answers instead
        self._fallback = HeuristicReformulator()

    async def reformulate(self, *, query: str, history: list[Exchange], model: str) -> str:
        if self._mode == "followups" and not history:
            return query
        messages = reformulation_messages(query=query, history=history[-self._max_history_turns :])
        try:
            async with asyncio.timeout(self._timeout_s):
                generation = await self._generator.generate(
                    model=model, messages=messages, temperature=self._temperature, max_tokens=self._max_tokens
                )
        except (LLMUnavailable, TimeoutError) as exc:
            log.warning("query reformulation failed, using the heuristic", extra={"model": model, "reason": str(exc)})
            return await self._fallback.reformulate(query=query, history=history, model=model)
        rewritten = first_line(without_reasoning(generation.text))
        if generation.finish_reason == "length" or not usable_rewrite(rewritten, query=query):
            log.warning(
                "query reformulation unusable, using the heuristic",
                extra={"model": model, "chars": len(rewritten), "finish_reason": generation.finish_reason},
            )
            return await self._fallback.reformulate(query=query, history=history, model=model)
        return rewritten


def reformulator_from(settings: Settings, generator: Generator) -> Reformulator | None:
    """The rewriter the settings ask for: none, the heuristic (offline generator) or the LLM one."""
    if settings.query_reformulation == "off":
        return None
    if settings.offline:
        return HeuristicReformulator()
    return LLMReformulator(generator, mode=settings.query_reformulation, timeout_s=settings.reformulation_timeout_s)


def reformulation_messages(*, query: str, history: list[Exchange]) -> list[dict[str, str]]:
    turns = "\n".join(f"User: {turn.standalone}\nAssistant: {_shorten(turn.answer)}" for turn in history)
    # An earlier answer may quote a document, and a document may try to end the conversation early.
    system = template().replace(CONVERSATION_SLOT, fenced(turns, tag=CONVERSATION_TAG) or "(no earlier turns)")
    return [{"role": "system", "content": system}, {"role": "user", "content": query}]


def usable_rewrite(rewritten: str, *, query: str) -> bool:
    """Not empty, not only punctuation ("…?"), not rambling, short enough for retrieval to search, and still a
    question: a model that answers a question instead of rewriting it ("Yes, set SESSION_TTL_SECONDS.") would send
    its answer to the search and the model."""
    if not any(c.isalnum() for c in rewritten) or len(rewritten) > min(_length_limit(query), MAX_QUERY_CHARS):
        return False
    return not (query.endswith(QUESTION_MARKS) and rewritten.endswith(FULL_STOPS))


def first_line(text: str) -> str:
    """The model's first non-empty line that is not a lead-in ("Here is the rewritten question:") or a code fence,
    without a "Standalone question:" label (bold or not) or quotes or bold around it."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not FENCE.match(line.strip())]
    line = next((line for line in lines if not line.endswith(":")), "")
    unwrapped = None
    while unwrapped != line:  # the wrappings come in any order: "**Query:** “…”", "“Query: …”"
        unwrapped = line
        line = _unwrapped(LABEL.sub("", BULLET.sub("", line)).strip())
    return line


def _unwrapped(line: str) -> str:
    """`line` without one pair of quotes or of Markdown bold around all of it."""
    if len(line) >= 2 and line[0] in QUOTES and line[-1] in QUOTES:
        return line[1:-1].strip()
    inner = line[len(BOLD) : -len(BOLD)]
    if line.startswith(BOLD) and line.endswith(BOLD) and inner and BOLD not in inner:
        return inner.strip()
    return line


def template() -> str:
    return read_template("reformulate.txt", slot=CONVERSATION_SLOT)


def _shorten(answer: str) -> str:
    answer = " ".join(answer.split())
    if len(answer) <= ANSWER_CHARS:
        return answer
    return answer[:ANSWER_CHARS].rsplit(" ", 1)[0] + " …"


def _length_limit(query: str) -> int:
    return max(MIN_REWRITE_LIMIT, 2 * len(query))
