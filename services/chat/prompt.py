"""Context assembly under a token budget, and the messages sent to the model.

Tokens are approximated as characters / 4 (close for English with GPT-style tokenizers); a later
issue may swap in a real tokenizer behind `estimate_tokens`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from services.chat.chunks import RetrievedChunk
from services.chat.context_format import format_block, wrap_context

SYSTEM_TEMPLATE_PATH = Path(__file__).parent / "prompts" / "system.txt"
CONTEXT_SLOT = "{context}"


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    chunks: list[RetrievedChunk]  # the chunks in the context; chunks[i] is passage [i + 1]


@cache
def system_template() -> str:
    template = SYSTEM_TEMPLATE_PATH.read_text(encoding="utf-8")
    if CONTEXT_SLOT not in template:
        raise ValueError(f"{SYSTEM_TEMPLATE_PATH} has no {CONTEXT_SLOT} slot")
    return template


def assemble_context(chunks: list[RetrievedChunk], *, token_budget: int) -> tuple[str, list[RetrievedChunk]]:
    """Number chunks [1]..[n] in rank order while they fit the budget (the first always goes in, cut if need be)."""
    blocks: list[str] = []
    used: list[RetrievedChunk] = []
    spent = 0
    for chunk in chunks:
        block = format_block(len(used) + 1, chunk.heading, chunk.content, chunk.page)
        cost = estimate_tokens(block)
        if spent + cost > token_budget:
            if used:
                break
            block = block[: token_budget * 4]  # a single oversized passage is cut rather than dropped
            cost = estimate_tokens(block)
        blocks.append(block)
        used.append(chunk)
        spent += cost
    return wrap_context(blocks), used


def build_prompt(*, query: str, chunks: list[RetrievedChunk], token_budget: int) -> Prompt:
    context, used = assemble_context(chunks, token_budget=token_budget)
    system = system_template().replace(CONTEXT_SLOT, context)
    return Prompt(messages=[{"role": "system", "content": system}, {"role": "user", "content": query}], chunks=used)
