"""Cut a document into overlapping chunks measured in model tokens, keeping the heading path, the
page, and the exact character span of each chunk in the original text."""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

CountTokens = Callable[[str], int]

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
# Coarse to fine; a span still over budget after the last one is cut by characters.
_SEPARATORS = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n\s*"),  # lines
    re.compile(r"(?<=[.!?;:])\s+"),  # sentences
    re.compile(r"\s+"),  # words
)


@dataclass(frozen=True)
class Chunk:
    text: str
    chunk_index: int
    section: str
    char_start: int
    char_end: int
    page: int | None = None  # 1-based, for texts with pages


@dataclass(frozen=True)
class _Heading:
    level: int
    title: str
    start: int  # offset of the heading line
    body_start: int  # offset just after the heading line


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    tokens: int


def _headings(text: str) -> list[_Heading]:
    found, offset, in_fence = [], 0, False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := _HEADING.match(line.rstrip("\r\n"))):
            found.append(_Heading(len(m.group(1)), m.group(2).strip(), offset, offset + len(line)))
        offset += len(line)
    return found


def document_title(text: str, *, fallback: str, markdown: bool = True) -> str:
    """The first level-1 heading of a markdown text, else `fallback`."""
    if markdown:
        for heading in _headings(text):
            if heading.level == 1:
                return heading.title
    return fallback


def _sections(text: str, *, markdown: bool) -> list[tuple[str, int, int]]:
    """(heading path, start, end) spans covering the text; the title heading is left out of paths.

    A heading with nothing under it but sub-headings opens the same span as its first sub-heading,
    so it never becomes a chunk of its own.
    """
    headings = _headings(text) if markdown else []
    title_heading = next((h for h in headings if h.level == 1), None)
    spans: list[tuple[str, int, int]] = []
    stack: list[_Heading] = []
    start, body_from, path = 0, 0, ""
    for heading in headings:
        if text[body_from : heading.start].strip():
            spans.append((path, start, heading.start))
            start = heading.start
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
        path = " > ".join(h.title for h in stack if h is not title_heading)
        body_from = heading.body_start
    spans.append((path, start, len(text)))
    return [(p, s, e) for p, s, e in spans if text[s:e].strip()]


def _split(text: str, start: int, end: int, level: int, count: CountTokens, budget: int) -> list[_Piece]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start >= end:
        return []
    tokens = count(text[start:end])
    if tokens <= budget:
        return [_Piece(start, end, tokens)]
    if level == len(_SEPARATORS):
        return _hard_split(text, start, end, tokens, count, budget)
    pieces, pos = [], start
    for match in _SEPARATORS[level].finditer(text, start, end):
        pieces += _split(text, pos, match.start(), level + 1, count, budget)
        pos = match.end()
    pieces += _split(text, pos, end, level + 1, count, budget)
    return pieces


def _hard_split(text: str, start: int, end: int, tokens: int, count: CountTokens, budget: int) -> list[_Piece]:
    """Cut left to right into pieces of at most `budget` tokens, placing each cut by the characters per token
    of the piece before it and counting only the new piece: counting the remainder after each cut made a
    long blob (an inline base64 image) cost time quadratic in its length."""
    pieces: list[_Piece] = []
    guessed_length = max(1, (end - start) * budget // tokens)
    while start < end:
        piece = _fitting_piece(text, start, min(end, start + guessed_length), count, budget)
        pieces.append(piece)
        length = piece.end - piece.start
        # At most double, so that a piece counting (next to) no tokens cannot make the next guess huge.
        guessed_length = max(1, min(2 * length, length * budget // max(1, piece.tokens)))
        start = piece.end
    return pieces


def _fitting_piece(text: str, start: int, stop: int, count: CountTokens, budget: int) -> _Piece:
    """text[start:stop], shortened in proportion to its excess until it fits `budget` (or is one character)."""
    tokens = count(text[start:stop])
    while tokens > budget and stop - start > 1:
        length = stop - start
        stop = start + max(1, min(length - 1, length * budget // tokens))
        tokens = count(text[start:stop])
    return _Piece(start, stop, tokens)


def _merge(pieces: list[_Piece], *, budget: int, overlap: int) -> list[tuple[int, int]]:
    """Greedily pack pieces up to `budget` tokens; each next chunk repeats up to `overlap` tokens."""
    spans: list[tuple[int, int]] = []
    window: list[_Piece] = []
    total = 0
    for piece in pieces:
        if window and total + piece.tokens > budget:
            spans.append((window[0].start, window[-1].end))
            while window and (total > overlap or total + piece.tokens > budget):
                total -= window.pop(0).tokens
        window.append(piece)
        total += piece.tokens
    if window:
        spans.append((window[0].start, window[-1].end))
    return spans


def _given_sections(text: str, section_starts: tuple[tuple[int, str], ...]) -> list[tuple[str, int, int]]:
    bounds = [(0, ""), *section_starts, (len(text), "")]
    spans = [(path, start, end) for (start, path), (end, _) in zip(bounds, bounds[1:]) if start < end]
    return [(p, s, e) for p, s, e in spans if text[s:e].strip()]


def _by_page(spans: list[tuple[str, int, int]], page_starts: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """Cut section spans at page starts, so that no chunk spans two pages; a section keeps its path across pages."""
    cut = []
    for path, start, end in spans:
        for boundary in page_starts[bisect.bisect_right(page_starts, start) :]:
            if boundary >= end:
                break
            cut.append((path, start, boundary))
            start = boundary
        cut.append((path, start, end))
    return cut


def chunk_text(
    text: str,
    *,
    count_tokens: CountTokens,
    chunk_size: int,
    chunk_overlap: int,
    markdown: bool = True,
    page_starts: tuple[int, ...] = (),
    section_starts: tuple[tuple[int, str], ...] = (),
) -> list[Chunk]:
    """Chunks of at most `chunk_size` tokens (as counted by `count_tokens`), consecutive chunks of a
    section sharing up to `chunk_overlap` tokens; markdown headings start new sections.

    With `page_starts` (the offset where each page begins, ascending), chunks never cross a page
    boundary and each carries its 1-based `page`; overlap does not reach back into the previous page.
    With `section_starts` ((offset, heading path), ascending), those are the sections instead of
    markdown headings.
    """
    if chunk_size < 1 or not 0 <= chunk_overlap < chunk_size:
        raise ValueError("need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size")
    if list(page_starts) != sorted(page_starts) or [o for o, _ in section_starts] != sorted(o for o, _ in section_starts):
        raise ValueError("page_starts and section_starts must be ascending")
    spans = _given_sections(text, section_starts) if section_starts else _sections(text, markdown=markdown)
    if page_starts:
        spans = _by_page(spans, page_starts)
    chunks: list[Chunk] = []
    for section, start, end in spans:
        pieces = _split(text, start, end, 0, count_tokens, chunk_size)
        for span_start, span_end in _merge(pieces, budget=chunk_size, overlap=chunk_overlap):
            page = bisect.bisect_right(page_starts, span_start) if page_starts else None
            chunks.append(Chunk(text[span_start:span_end], len(chunks), section, span_start, span_end, page))
    return chunks
