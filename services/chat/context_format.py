"""How numbered passages are written into the system prompt, and read back by the offline generator.

Writer and parser live together so they cannot drift apart. A block is a header line
`[n] Title > Section (page p)` followed by the passage text; blocks are numbered 1..n in order,
and the whole context sits between CONTEXT_START and CONTEXT_END lines.

Passage text is written by the documents' authors, not by Cairn, so it must not be able to pass for
the prompt's own structure, to the parser or to a model: a heading is kept to one line, a passage
line that looks like a header gets a backslash before its bracket (`\\[9] ...`, Markdown's own escape),
and a copy of the context tags inside a passage or heading is escaped (prompts.fenced).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from services.chat.prompts import fenced

CONTEXT_TAG = "context"
CONTEXT_START = f"<{CONTEXT_TAG}>"
CONTEXT_END = f"</{CONTEXT_TAG}>"
_HEADER = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class ContextBlock:
    number: int
    heading: str
    text: str


def block_header(number: int, heading: str, page: int | None = None) -> str:
    page_part = f" (page {page})" if page is not None else ""
    one_line = " ".join(heading.split())  # a title holding a line break could start a block of its own
    return f"[{number}] {fenced(one_line, tag=CONTEXT_TAG)}{page_part}"


def format_block(number: int, heading: str, text: str, page: int | None = None) -> str:
    body = _HEADER.sub(lambda m: "\\" + m.group(0), fenced(text.strip(), tag=CONTEXT_TAG))
    return f"{block_header(number, heading, page)}\n{body}"


def wrap_context(blocks: list[str]) -> str:
    return "\n".join([CONTEXT_START, "\n\n".join(blocks), CONTEXT_END])


def parse_context(message: str) -> list[ContextBlock]:
    """The numbered blocks of the context found in `message` (empty when there is none).

    Only a header carrying the next expected number starts a new block, and the writer escapes
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
