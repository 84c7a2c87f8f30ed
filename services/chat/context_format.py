"""How numbered passages are written into the system prompt, and read back by the offline generator.

Writer and parser live together so they cannot drift apart. A block is a header line
`[n] Title > Section (page p)` followed by the passage text; blocks are numbered 1..n in order,
and the whole context sits between CONTEXT_START and CONTEXT_END lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

CONTEXT_START = "<context>"
CONTEXT_END = "</context>"
_HEADER = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class ContextBlock:
    number: int
    heading: str
    text: str


def block_header(number: int, heading: str, page: int | None = None) -> str:
    page_part = f" (page {page})" if page is not None else ""
    return f"[{number}] {heading}{page_part}"


def format_block(number: int, heading: str, text: str, page: int | None = None) -> str:
    # Passage lines that look like a header are indented one space so the parser never splits on them.
    body = _HEADER.sub(lambda m: " " + m.group(0), text.strip())
    return f"{block_header(number, heading, page)}\n{body}"


def wrap_context(blocks: list[str]) -> str:
    return "\n".join([CONTEXT_START, "\n\n".join(blocks), CONTEXT_END])


def parse_context(message: str) -> list[ContextBlock]:
    """The numbered blocks of the context found in `message` (empty when there is none).

    Only a header carrying the next expected number starts a new block, and the writer indents
    passage lines that look like headers, so passage text is never mistaken for one.
    """
    start = message.find(CONTEXT_START)
    end = message.rfind(CONTEXT_END)
    if start < 0 or end < start:
        return []
    body = message[start + len(CONTEXT_START) : end]
    blocks: list[ContextBlock] = []
    current: tuple[int, str, int] | None = None  # number, heading, text start
    for match in _HEADER.finditer(body):
        if int(match.group(1)) != len(blocks) + (current is not None) + 1:
            continue
        if current is not None:
            blocks.append(ContextBlock(current[0], current[1], body[current[2] : match.start()].strip()))
        current = (int(match.group(1)), match.group(2).strip(), match.end())
    if current is not None:
        blocks.append(ContextBlock(current[0], current[1], body[current[2] :].strip()))
    return blocks
