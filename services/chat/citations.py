"""Citation post-processing: keep the [n] markers that point at a passage, renumber them in order of
first use, and describe each cited passage."""
from __future__ import annotations

import re
from dataclasses import dataclass

from services.chat.chunks import RetrievedChunk

SNIPPET_CHARS = 240
_MARKER = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")
_DROPPED = "\x00"
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


@dataclass(frozen=True)
class Citation:
    number: int
    chunk: RetrievedChunk
    snippet: str


@dataclass(frozen=True)
class CitedAnswer:
    answer: str
    citations: list[Citation]


def snippet_of(text: str, limit: int = SNIPPET_CHARS) -> str:
    """`text` cut to at most `limit` characters: at the last sentence end if one falls in the second
    half of the window, else at the last word boundary with an ellipsis. Markdown headings are left out."""
    prose = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    text = " ".join(" ".join(prose).split()) or " ".join(text.split())
    if len(text) <= limit:
        return text
    window = text[:limit]
    ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    if ends and ends[-1] >= limit // 2:
        return window[: ends[-1]]
    cut = window[: limit - 1].rsplit(" ", 1)[0] if " " in window else window[: limit - 1]
    return cut.rstrip(" ,;:") + "…"


def resolve_citations(answer: str, chunks: list[RetrievedChunk]) -> CitedAnswer:
    """Rewrite `answer` so its markers are numbered 1..k in order of first use.

    `chunks[i]` is passage [i + 1] of the prompt. Numbers that point at no passage are dropped
    (a marker left empty disappears); repeats inside one marker collapse.
    """
    renumbered: dict[int, int] = {}

    def rewrite(match: re.Match[str]) -> str:
        numbers: list[int] = []
        for part in match.group(1).split(","):
            original = int(part)
            if not 1 <= original <= len(chunks):
                continue
            new = renumbered.setdefault(original, len(renumbered) + 1)
            if new not in numbers:
                numbers.append(new)
        return f"[{', '.join(map(str, numbers))}]" if numbers else _DROPPED

    text = _MARKER.sub(rewrite, answer)
    text = re.sub(rf"[ \t]*{_DROPPED}", "", text).strip()  # a dropped marker takes its leading space along
    citations = [
        Citation(number=new, chunk=chunks[original - 1], snippet=snippet_of(chunks[original - 1].content))
        for original, new in sorted(renumbered.items(), key=lambda item: item[1])
    ]
    return CitedAnswer(answer=text, citations=citations)
