"""Citation post-processing: read the markers the model wrote ([n], [n, m], [n; m], [n and m], [n-m], [n–m],
[Citation n], [Source n], 【n】, ［n］, [Title > Section]), keep those that point at a passage, merge passages of the
same document page, renumber in order of first use, rewrite every marker to the plain [n] form and describe each
cited passage."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from services.chat.chunks import RetrievedChunk

SNIPPET_CHARS = 200
# Any bracketed text not followed by "(" (a Markdown link); its content decides whether it is a citation.
# Models trained on Chinese text also write the full-width 【1】 and ［１］.
_BRACKET = re.compile(r"(?:\[([^\[\]\n]{1,200})\]|【([^【】\n]{1,200})】|［([^［］\n]{1,200})］)(?!\()")
# Code, where brackets are the code's own, as Markdown reads it: a fenced block opens on a line of its own (a
# backtick fence's info string holds no backtick) and holds to a line of as long a fence or to the answer's end;
# an inline span is a run of one to three backticks closed by a run as long on the same line (``a`b[1]``), as
# the chat page reads it (longer runs would make the search quadratic). Other backticks, such as a run of three
# inside a sentence that none closes, are text.
_CODE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}(?=[^`\n]*$)|~{3,})[^\n]*(?:\n.*?(?:\n[ \t]*(?P=fence)[`~]*[ \t]*$|\Z)|\Z)"
    r"|(?<!`)(?P<ticks>`{1,3})(?!`)[^\n]*?(?<!`)(?P=ticks)(?!`)",
    re.DOTALL | re.MULTILINE,
)
_MAX_PASSAGE_NUMBER = 999  # [2019] is a year, left as written; no prompt holds a thousand passages
# A number may carry the word models put before it ("Citation 2", "Source: 2", "Doc 2", "Passage 2", "Sources
# 1, 2"), a range may be written with an en or em dash, as typesetting models do ("1–3"), and a list with the
# full-width comma of Chinese text ("1，2"), a semicolon ("1; 2") or an "and" ("1 and 2", "1, 2, and 3", "1 & 2").
# A list left unread would keep the prompt's numbers while the markers around it are renumbered.
_LABEL = r"(?:\^|(?:citation|source|doc|document|passage)s?\s*:?\s*)?"  # "^": a Markdown footnote, [^2]
_DASH = r"[-–—]"
_COMMA = r"[,，;；]"
_AND = r"(?:\band\b|&)"
_SEPARATOR = rf"\s*(?:{_COMMA}\s*(?:{_AND}\s*)?|{_AND}\s*)"
_NUMBER_LIST = re.compile(
    rf"\s*{_LABEL}\d+(?:\s*{_DASH}\s*\d+)?(?:{_SEPARATOR}{_LABEL}\d+(?:\s*{_DASH}\s*\d+)?)*\s*", re.I
)
_NUMBER_ITEM = re.compile(rf"(\d+)(?:\s*{_DASH}\s*(\d+))?")
# "[0, 1]", "[0-100]": passages count from 1, so a range of values
_INTERVAL = re.compile(rf"\s*[0０]\s*(?:{_COMMA}|{_DASH})\s*\d+\s*")
_MAX_RANGE = 50  # a wider "range" is a typo or a year span, not a citation
_DICE_THRESHOLD = 0.5
_DROPPED = "\x00"
# A sentence ends at . ! or ? before the end or a word that does not start in lower case ("e.g. the flag").
_SENTENCE_END = re.compile(r"[.!?](?=$|\s+(?![a-z]))")
# How a model says the passages lack what was asked, in a sentence normalised by _plain: the wording the
# system prompt asks for ("the documents do not contain enough information to answer") and its usual
# variants. A sentence must also speak of the speaker or the sources (_ABOUT_THE_SOURCES): "Events carry
# no information about the password" states a fact from a passage.
_REFUSAL = re.compile(
    r"""\b(?:not|no|without)\b[^.!?]{0,40}?\b(?:enough|sufficient|adequate)\b[^.!?]{0,15}?\binformation\b
    | \binsufficient\s+information\b
    | \bnot\b[^.!?]{0,25}?\b(?:contain|include|provide|mention|cover|find|found|have|has|give|offer)s?\b
      [^.!?]{0,25}?\binformation\b
    | \bno\s+(?:relevant\s+|specific\s+)?information\s+(?:about|on|regarding|concerning|for|in)\b""",
    re.VERBOSE,
)
_ABOUT_THE_SOURCES = re.compile(r"\b(?:i|i'm|i've|we|my|our|documents?|context|passages?|sources?|provided|excerpts?)\b")
_CLAUSE_BREAK = re.compile(r"(?<=[.!?;])\s+|,\s+(?=(?:but|however|although|though)\b)", re.IGNORECASE)


@dataclass(frozen=True)
class Citation:
    number: int
    chunk: RetrievedChunk  # the first passage cited under this number: its id and snippet are shown
    snippet: str
    # Every passage cited under this number (passages of one page share it); empty means just `chunk`.
    passages: tuple[RetrievedChunk, ...] = ()

    @property
    def cited_passages(self) -> tuple[RetrievedChunk, ...]:
        return self.passages or (self.chunk,)


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


def _plain(sentence: str) -> str:
    return sentence.lower().replace("’", "'").replace("n't", " not").replace("cannot", "can not")


def _says_information_is_missing(sentence: str) -> bool:
    plain = _plain(sentence)
    return bool(_ABOUT_THE_SOURCES.search(plain) and _REFUSAL.search(plain))


def _clauses(answer: str) -> list[str]:
    """Sentences, and the parts of a sentence joined by "; " or ", but": "I have no information about
    pricing, but sessions live in Redis [1]" refuses one thing and answers another. Markers written after
    the full stop ("... information. [1]") stay with their sentence."""
    clauses: list[str] = []
    for piece in _CLAUSE_BREAK.split(answer):
        if clauses and not _BRACKET.sub("", piece).strip():
            clauses[-1] += " " + piece
        elif piece.strip():
            clauses.append(piece)
    return clauses


def lacks_information(answer: str) -> bool:
    """Whether the answer says, somewhere, that the documents lack what was asked."""
    return any(_says_information_is_missing(clause) for clause in _clauses(answer))


def _only_refuses(answer: str) -> bool:
    """Whether every part of `answer` that carries a citation marker says the information is missing:
    the citations then back no claim, and the answer is a refusal."""
    prose = "".join(prose_and_code(answer)[0::2])
    return all(_says_information_is_missing(clause) for clause in _clauses(prose) if _BRACKET.search(clause))


def says_anything(answer: str) -> bool:
    """Whether the answer has a word besides its markers: "[1][2]" alone claims nothing its passages back."""
    return any(ch.isalnum() for ch in _BRACKET.sub("", answer))


def _numbers(content: str) -> list[int] | None:
    """1-based passage numbers of a numeric marker, or None when `content` is not one."""
    if not _NUMBER_LIST.fullmatch(content) or _INTERVAL.fullmatch(content):
        return None
    if any(int(n) > _MAX_PASSAGE_NUMBER for n in re.findall(r"\d+", content)):
        return None
    numbers: list[int] = []
    for match in _NUMBER_ITEM.finditer(content):
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low or high - low > _MAX_RANGE:
            numbers.append(low)
        else:
            numbers.extend(range(low, high + 1))
    return numbers


def _bigrams(text: str) -> list[str]:
    text = " ".join(text.lower().split())
    return [text[i : i + 2] for i in range(len(text) - 1)]


def dice(a: str, b: str) -> float:
    """Sørensen–Dice coefficient of the two strings' character bigrams (multiset)."""
    left, right = _bigrams(a), _bigrams(b)
    if not left or not right:
        return 0.0
    remaining = list(right)
    shared = 0
    for gram in left:
        if gram in remaining:
            remaining.remove(gram)
            shared += 1
    return 2 * shared / (len(left) + len(right))


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def match_heading(reference: str, chunks: list[RetrievedChunk]) -> int | None:
    """1-based number of the passage a `Title > Section` reference names: exact title (and section),
    then containment, then the best Dice bigram similarity above 0.5."""
    title, _, section = (part.strip() for part in reference.partition(">"))
    title, section = _norm(title), _norm(section)
    for i, chunk in enumerate(chunks):
        if _norm(chunk.title) == title and (not section or _norm(chunk.section) == section):
            return i + 1
    for i, chunk in enumerate(chunks):
        heading = _norm(chunk.heading)
        if _norm(reference) in heading or (title and title in _norm(chunk.title) and section in _norm(chunk.section)):
            return i + 1
    scored = [(dice(_norm(reference), _norm(chunk.heading)), i) for i, chunk in enumerate(chunks)]
    best = max(scored, default=(0.0, -1))
    return best[1] + 1 if best[0] > _DICE_THRESHOLD else None


def _page_key(chunk: RetrievedChunk) -> tuple[str, object]:
    # Chunks without a page number are distinct passages (a Markdown file has no pages to merge on).
    return (chunk.doc_id, chunk.page) if chunk.page is not None else (chunk.doc_id, "chunk:" + chunk.chunk_id)


def _marker_passages(content: str, chunks: list[RetrievedChunk]) -> list[int] | None:
    """1-based passage numbers a bracketed `content` cites, or None when it is not a citation marker
    (ordinary bracketed prose, or a heading that names no passage)."""
    numbers = _numbers(content)
    if numbers is not None:
        return numbers
    if ">" in content and (heading_match := match_heading(content, chunks)) is not None:
        return [heading_match]
    return None


def _without_dropped(text: str) -> str:
    """`text` without the dropped markers, each taking the blanks before it along. Split rather than a
    "[ \\t]*" pattern, which rescanned a long run of blanks from each of its characters."""
    pieces = text.split(_DROPPED)
    return "".join([piece.rstrip(" \t") for piece in pieces[:-1]] + pieces[-1:]).strip()


def _content(marker: re.Match[str]) -> str:
    """What a `_BRACKET` match holds between its brackets, square or full-width."""
    return next(group for group in marker.groups() if group is not None)


def _glued(marker: re.Match[str]) -> bool:
    """Whether the marker follows a word with no space: `items[0]` is an index when [0] names no passage,
    where `Redis[1]` is a citation when [1] does."""
    start = marker.start()
    return start > 0 and (marker.string[start - 1].isalnum() or marker.string[start - 1] == "_")


def prose_and_code(text: str) -> list[str]:
    """`text` cut into prose, code, prose, code, ... (fenced blocks and inline spans are code)."""
    parts: list[str] = []
    last = 0
    for code in _CODE.finditer(text):
        parts += [text[last : code.start()], code.group(0)]
        last = code.end()
    return [*parts, text[last:]]


def _outside_code(text: str, replace: Callable[[re.Match[str]], str]) -> str:
    """`text` with `_BRACKET.sub(replace, ...)` applied to its prose only, never inside code."""
    parts = prose_and_code(text)
    return "".join(part if i % 2 else _BRACKET.sub(replace, part) for i, part in enumerate(parts))


def _strip_markers(answer: str, chunks: list[RetrievedChunk]) -> str:
    def drop(match: re.Match[str]) -> str:
        numbers = _marker_passages(_content(match), chunks)
        cites = numbers is not None and (not _glued(match) or any(1 <= n <= len(chunks) for n in numbers))
        return _DROPPED if cites else match.group(0)

    return _without_dropped(_outside_code(answer, drop))


def resolve_citations(answer: str, chunks: list[RetrievedChunk]) -> CitedAnswer:
    """Rewrite `answer` so its markers are plain [n], numbered 1..k in order of first use.

    `chunks[i]` is passage [i + 1] of the prompt. Numbers that point at no passage are dropped
    (a marker left empty disappears); passages of one document page share one number. An answer that
    says the information is missing, and cites passages for nothing else, loses its markers and gets no
    citations (the caller falls back); one that answers a part with citations and says the rest is
    missing is kept.
    """
    if lacks_information(answer) and _only_refuses(answer):
        return CitedAnswer(answer=_strip_markers(answer, chunks), citations=[])
    by_key: dict[tuple[str, object], int] = {}
    cited: dict[int, list[RetrievedChunk]] = {}

    def rewrite(match: re.Match[str]) -> str:
        originals = _marker_passages(_content(match), chunks)
        if originals is None:
            return match.group(0)
        numbers: list[int] = []
        for original in originals:
            if not 1 <= original <= len(chunks):
                continue
            chunk = chunks[original - 1]
            new = by_key.setdefault(_page_key(chunk), len(by_key) + 1)
            same_number = cited.setdefault(new, [])
            if chunk not in same_number:
                same_number.append(chunk)
            if new not in numbers:
                numbers.append(new)
        if numbers:
            return f"[{', '.join(map(str, numbers))}]"
        return match.group(0) if _glued(match) else _DROPPED

    text = _without_dropped(_outside_code(answer, rewrite))
    citations = [
        Citation(number=n, chunk=chunks[0], snippet=snippet_of(chunks[0].content), passages=tuple(chunks))
        for n, chunks in sorted(cited.items())
    ]
    return CitedAnswer(answer=text, citations=citations)
