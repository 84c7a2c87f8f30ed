"""Context assembly under a token budget, and the messages sent to the model.

Tokens are approximated as characters / 4: close for English prose with GPT-style tokenizers and a
little generous for code, with no tokenizer table to load (tiktoken downloads its tables). The model's
own limit is what the budget protects, and it is far above the default budget of 3500.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from services.chat.chunks import RetrievedChunk
from services.chat.context_format import format_block, wrap_context
from services.chat.prompts import read_template

CONTEXT_SLOT = "{context}"


CHARS_PER_TOKEN = 4
MIN_CUT_CHARS = 80  # a shorter leftover is not worth a passage of its own
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    chunks: list[RetrievedChunk]  # the chunks in the context; chunks[i] is passage [i + 1]
    context_tokens: int = 0  # the context's estimated size


def system_template() -> str:
    return read_template("system.txt", slot=CONTEXT_SLOT)


def assemble_context(chunks: list[RetrievedChunk], *, token_budget: int) -> tuple[str, list[RetrievedChunk]]:
    """Number chunks [1]..[n] in rank order while they fit the budget.

    The first chunk that does not fit whole is cut at its last sentence end inside the budget and
    ends the context; with no sentence end there it is left out, unless it is the only passage,
    which is then cut at a word boundary rather than dropped.
    """
    blocks: list[str] = []
    used: list[RetrievedChunk] = []
    spent = 0
    for chunk in chunks:
        number = len(used) + 1
        block = format_block(number, chunk.heading, chunk.content, chunk.page)
        if spent + estimate_tokens(block) > token_budget:
            header_cost = estimate_tokens(format_block(number, chunk.heading, "", chunk.page)) + 1
            room_chars = (token_budget - spent - header_cost) * CHARS_PER_TOKEN
            text = cut_text(chunk.content, room_chars, at_words=not used) if room_chars >= MIN_CUT_CHARS else ""
            if text:
                blocks.append(format_block(number, chunk.heading, text, chunk.page))
                used.append(chunk)
            break
        blocks.append(block)
        used.append(chunk)
        spent += estimate_tokens(block)
    return wrap_context(blocks), used


def cut_text(text: str, max_chars: int, *, at_words: bool) -> str:
    """`text` cut to at most `max_chars`: at the last sentence end, else (with `at_words`) at the last
    word boundary; empty when neither fits."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    window = text[: max_chars + 1]  # one more character shows whether the cut falls between words
    ends = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() <= max_chars]
    if ends:
        return window[: ends[-1]].strip()
    if at_words and " " in window:
        return window.rsplit(None, 1)[0].rstrip(" ,;:")
    return ""


def build_prompt(*, query: str, chunks: list[RetrievedChunk], token_budget: int) -> Prompt:
    context, used = assemble_context(chunks, token_budget=token_budget)
    system = system_template().replace(CONTEXT_SLOT, context)
    return Prompt(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": query}], chunks=used,
        context_tokens=estimate_tokens(context),
    )


def halved_prompt(prompt: Prompt, *, query: str) -> Prompt | None:
    """`prompt` with about half as much passage text: its first passages, so that [n] names the same
    passage in both; None when no passage would be left."""
    smaller = build_prompt(query=query, chunks=prompt.chunks, token_budget=prompt.context_tokens // 2)
    return smaller if smaller.chunks else None
