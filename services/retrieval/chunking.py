"""Cut a document into overlapping chunks measured in model tokens, keeping the heading path, the
page, and the exact character span of each chunk in the original text."""
from __future__ import annotations

import bisect
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CountTokens = Callable[[str], int]

# Raised whenever a change here cuts the same text differently (2: CommonMark fences, setext headings,
# front matter left out; 3: paragraphs of CRLF text, MAX_CHARS_PER_TOKEN; 4: a fenced code block that fits a
# chunk kept whole, no headings inside HTML comments; 5: an HTML <pre> block that fits a chunk kept whole;
# 6: '#' headings indented by up to three spaces; 7: a PDF bookmark with only the next one under it opens
# the next one's section).
# Documents keep the version they were cut with, so re-ingesting them after an upgrade cuts them again rather
# than reporting them unchanged.
CHUNKER_VERSION = 7
# Most characters one token may stand for. A word the tokenizer cannot split (a DNA sequence, a long hex
# string) counts as a single unknown token however long it is: a 200,000-character line was one chunk.
MAX_CHARS_PER_TOKEN = 16

# The title's closing '#'s and trailing blanks are cut in Python (_heading_text): a pattern that did it
# backtracked quadratically on a long run of spaces ("# a" + 40,000 spaces + "b" took 30 s).
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")
# CommonMark: a backtick fence's info string holds no backtick; a fence closes only at a run of its own
# character at least as long, with nothing after it.
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}(?=[^`]*$)|~{3,})")
_CLOSING_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# Lines that open a list item or a quote: a line of dashes under them is a thematic break, not a heading.
_LIST_OR_QUOTE = re.compile(r"^ {0,3}(?:>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$))")
_INDENTED_CODE = re.compile(r"^(?: {4}|\t)")
# An HTML comment (commented-out text is not shown, so a '# line' in it is no heading) runs to the line holding '-->'.
_COMMENT_OPEN = re.compile(r"^ {0,3}<!--")
# YAML front matter: only at the very start, opened by '---', its first line a key, closed by '---' or '...'.
# A line is "[^\n]*\n", its '\r' (Windows) among the characters: with ".*\r?\n" each CRLF line matched two ways,
# and an unclosed front matter backtracked through all of them, doubling the time with every line.
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n(?P<yaml>[\w-]+:(?:[ \t\r][^\n]*)?\n(?:[^\n]*\n)*?)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)"
)
# TOML front matter (Hugo, Zola): between '+++' lines at the very start, read only if it is valid TOML.
_TOML_FRONT_MATTER = re.compile(r"\A\+\+\+[ \t]*\r?\n(?P<toml>(?:[^\n]*\n)*?)\+\+\+[ \t]*(?:\r?\n|\Z)")
_YAML_TITLE = re.compile(r"^title:[ \t]*(?P<value>[^\s|>].*)$", re.MULTILINE)  # trailing blanks cut in Python
# Coarse to fine; a span still over budget after the last one is cut by characters.
_SEPARATORS = (
    re.compile(r"\n[ \t]*\r?\n\s*"),  # paragraphs, also between Windows (CRLF) lines
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
class Heading:
    """A heading in a text, as the chunker finds it in markdown or a parser places it (`sections_under`)."""

    level: int
    title: str
    start: int  # offset of the heading (of its first line)
    body_start: int  # offset just after the heading's last line


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    tokens: int


def front_matter_end(text: str) -> int:
    """Where the text after a markdown file's front matter (YAML or TOML) begins; 0 without front matter."""
    if front := _FRONT_MATTER.match(text):
        return front.end()
    if (front := _TOML_FRONT_MATTER.match(text)) and _toml(front.group("toml")) is not None:
        return front.end()
    return 0


def _front_matter_title(text: str) -> str | None:
    if front := _FRONT_MATTER.match(text):
        found = _YAML_TITLE.search(front.group("yaml"))
        value = found.group("value").rstrip(" \t\r") if found else ""
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1].strip()
        return value or None
    if front := _TOML_FRONT_MATTER.match(text):
        title = (_toml(front.group("toml")) or {}).get("title")
        return title.strip() or None if isinstance(title, str) else None
    return None


def _toml(text: str) -> dict | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _heading_text(raw: str) -> str:
    """An ATX heading's title: without an optional closing run of '#' (after a blank) and outer blanks."""
    text = raw.rstrip(" \t")
    unclosed = text.rstrip("#")
    if unclosed != text and (not unclosed or unclosed[-1] in " \t"):
        text = unclosed
    return text.strip(" \t")


def _closes(line: str, fence: str) -> bool:
    closing = _CLOSING_FENCE.match(line)
    return bool(closing) and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence)


def _headings(text: str, start: int = 0) -> list[Heading]:
    """ATX (`## x`) and setext (`x` underlined with `===` or `---`) headings outside code blocks and HTML
    comments, from `start`."""
    return _structure(text, start)[0]


def _structure(text: str, start: int = 0) -> tuple[list[Heading], list[tuple[int, int]]]:
    """The headings from `start`, and the (start, end) span of each fenced code block, fences included."""
    found: list[Heading] = []
    code_blocks: list[tuple[int, int]] = []
    fence = ""  # the opening fence, while inside a fenced code block
    fence_start = 0
    in_comment = False
    paragraph: list[tuple[int, str]] = []  # (offset, line) of the paragraph read so far: an underline makes it a heading
    in_list_or_quote = False  # until a blank line
    offset = start
    for raw in text[start:].splitlines(keepends=True):
        line, line_start, offset = raw.rstrip("\r\n"), offset, offset + len(raw)
        if fence:
            if _closes(line, fence):
                fence = ""
                code_blocks.append((fence_start, line_start + len(line)))
        elif in_comment:
            in_comment = "-->" not in line
        elif opening := _FENCE.match(line):
            fence, fence_start, paragraph = opening.group(1), line_start, []
        elif comment := _COMMENT_OPEN.match(line):
            in_comment, paragraph = "-->" not in line[comment.end() :], []
        elif not line.strip():
            paragraph, in_list_or_quote = [], False
        elif (atx := _HEADING.match(line)) and (title := _heading_text(atx.group(2))):
            found.append(Heading(len(atx.group(1)), title, line_start, offset))
            paragraph, in_list_or_quote = [], False
        elif paragraph and (underline := _SETEXT_UNDERLINE.match(line)):
            title = " ".join(part.strip() for _, part in paragraph)
            found.append(Heading(1 if underline.group(1)[0] == "=" else 2, title, paragraph[0][0], offset))
            paragraph = []
        elif _THEMATIC_BREAK.match(line):
            paragraph = []
        elif in_list_or_quote or _LIST_OR_QUOTE.match(line) or (not paragraph and _INDENTED_CODE.match(line)):
            paragraph, in_list_or_quote = [], True
        else:
            paragraph.append((line_start, line))
    if fence:
        code_blocks.append((fence_start, len(text)))
    return found, code_blocks


def document_title(text: str, *, fallback: str, markdown: bool = True) -> str:
    """A markdown text's title: the `title:` of its front matter, else its first level-1 heading, else `fallback`."""
    if markdown:
        if title := _front_matter_title(text):
            return title
        for heading in _headings(text, front_matter_end(text)):
            if heading.level == 1:
                return heading.title
    return fallback


def sections_under(text: str, headings: list[Heading]) -> tuple[tuple[int, str], ...]:
    """For a parser that knows where its headings are in `text`: the `section_starts` giving the sections
    these headings would give if the chunker read them as markdown."""
    return tuple((start, path) for path, start, _ in _sections(text, headings) if start or path)


def _markdown_structure(text: str) -> tuple[list[tuple[str, int, int]], list[tuple[int, int]]]:
    """Section spans and fenced code block spans of a markdown text."""
    body_start = front_matter_end(text)
    headings, code_blocks = _structure(text, body_start)
    return _sections(text, headings, start=body_start), code_blocks


def _sections(text: str, headings: list[Heading], *, start: int = 0) -> list[tuple[str, int, int]]:
    """(heading path, start, end) spans covering the text from `start`; the title heading is left out of paths.

    A heading with nothing under it but sub-headings opens the same span as its first sub-heading,
    so it never becomes a chunk of its own.
    """
    title_heading = next((h for h in headings if h.level == 1), None)
    spans: list[tuple[str, int, int]] = []
    stack: list[Heading] = []
    body_from, path = start, ""
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


def _inside(offset: int, blocks: Sequence[tuple[int, int]]) -> bool:
    """Whether `offset` lies strictly inside one of `blocks` (ascending, not overlapping)."""
    at = bisect.bisect_left(blocks, (offset,)) - 1
    return at >= 0 and offset < blocks[at][1]


def _split(
    text: str, start: int, end: int, level: int, count: CountTokens, budget: int, whole: Sequence[tuple[int, int]] = ()
) -> list[_Piece]:
    """Pieces of at most `budget` tokens, cut at the coarsest separators that make them fit. At the paragraph
    level, the blank lines inside a `whole` span (a code block) are no cut while the span fits a chunk."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start >= end:
        return []
    # A span longer than any chunk can be is cut without counting it: the tokenizer's record of a whole 20 MB
    # document took gigabytes (ten for 20 MB of dots), enough to have the service killed.
    tokens = count(text[start:end]) if end - start <= budget * MAX_CHARS_PER_TOKEN else None
    if tokens is not None and tokens <= budget:
        return [_Piece(start, end, tokens)]
    if level == len(_SEPARATORS):
        return _hard_split(text, start, end, tokens, count, budget)
    pieces, pos, kept_whole = [], start, False
    for match in _SEPARATORS[level].finditer(text, start, end):
        if whole and _inside(match.start(), whole):
            kept_whole = True
            continue
        pieces += _split(text, pos, match.start(), 0 if kept_whole else level + 1, count, budget)
        pos, kept_whole = match.end(), False
    pieces += _split(text, pos, end, 0 if kept_whole else level + 1, count, budget)
    return pieces


def _hard_split(text: str, start: int, end: int, tokens: int | None, count: CountTokens, budget: int) -> list[_Piece]:
    """Cut left to right into pieces of at most `budget` tokens, placing each cut by the characters per token
    of the piece before it and counting only the new piece: counting the remainder after each cut made a
    long blob (an inline base64 image) cost time quadratic in its length. The first cut is placed by the
    span's `tokens`, or, for a span too long to have been counted, at the most characters a chunk can hold."""
    pieces: list[_Piece] = []
    guessed_length = max(1, (end - start) * budget // tokens) if tokens else budget * MAX_CHARS_PER_TOKEN
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


def _at_least_by_length(count_tokens: CountTokens) -> CountTokens:
    return lambda text: max(count_tokens(text), -(-len(text) // MAX_CHARS_PER_TOKEN))


def chunk_text(
    text: str,
    *,
    count_tokens: CountTokens,
    chunk_size: int,
    chunk_overlap: int,
    markdown: bool = True,
    page_starts: tuple[int, ...] = (),
    section_starts: tuple[tuple[int, str], ...] = (),
    code_blocks: tuple[tuple[int, int], ...] = (),
) -> list[Chunk]:
    """Chunks of at most `chunk_size` tokens (as counted by `count_tokens`, a token standing for at most
    MAX_CHARS_PER_TOKEN characters), consecutive chunks of a section sharing up to `chunk_overlap` tokens;
    markdown headings start new sections, and markdown front matter is left out.

    With `page_starts` (the offset where each page begins, ascending), chunks never cross a page
    boundary and each carries its 1-based `page`; overlap does not reach back into the previous page.
    With `section_starts` ((offset, heading path), ascending), those are the sections instead of
    markdown headings. `code_blocks` ((start, end), ascending, not overlapping): the code blocks of a text
    not read as markdown (a parser wrote them), each kept in one chunk when it fits, as markdown's fenced ones are.
    """
    if chunk_size < 1 or not 0 <= chunk_overlap < chunk_size:
        raise ValueError("need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size")
    if list(page_starts) != sorted(page_starts) or [o for o, _ in section_starts] != sorted(o for o, _ in section_starts):
        raise ValueError("page_starts and section_starts must be ascending")
    if any(end <= start for start, end in code_blocks) or any(
        after[0] < before[1] for before, after in zip(code_blocks, code_blocks[1:])
    ):
        raise ValueError("code_blocks must be ascending, non-empty and not overlapping")
    if section_starts:
        spans = _given_sections(text, section_starts)
    elif markdown:
        spans, found = _markdown_structure(text)
        code_blocks = code_blocks or tuple(found)
    else:
        spans = _sections(text, [])
    if page_starts:
        spans = _by_page(spans, page_starts)
    count = _at_least_by_length(count_tokens)
    chunks: list[Chunk] = []
    for section, start, end in spans:
        pieces = _split(text, start, end, 0, count, chunk_size, code_blocks)
        for span_start, span_end in _merge(pieces, budget=chunk_size, overlap=chunk_overlap):
            page = bisect.bisect_right(page_starts, span_start) if page_starts else None
            chunks.append(Chunk(text[span_start:span_end], len(chunks), section, span_start, span_end, page))
    return chunks
