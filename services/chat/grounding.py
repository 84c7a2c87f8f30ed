"""Grounding check: does each cited passage support the sentence that cites it?

Input is an answer whose markers citations.resolve_citations has already rewritten to plain [n].
Every sentence carrying markers is compared with each passage it cites; sentences without a marker
are not checked (they claim no source).

The measure is lexical, because it must be cheap: about 1 ms for an answer over 8 passages (an
embedding call costs ~15 ms). For a sentence S (markers removed) and evidence E (one passage, or the union of
the passages a sentence cites):

    score = 0.8 × coverage + 0.2 × bigram coverage, halved when S has a number E lacks

- coverage: the IDF-weighted share of S's content terms (text_terms: stopwords out, light stemming)
  found in E. IDF is taken over the passages given to the model plus the cited ones, smoothed to
  1 + ln((N + 1) / (df + 1)): a term every passage has ("cairn") weighs 1, a term no passage has
  (an invented fact) weighs most.
- bigram coverage: the share of S's adjacent content-term pairs that are adjacent in E. It rewards
  phrases taken over and penalises claims assembled from words scattered across the passage.
- numbers: a number absent from the passage ("12 hours" for "24 hours") is the commonest harmful
  misquote, and one wrong token barely moves a coverage, so it halves the score.

Verdicts: supported ≥ SUPPORTED_AT (0.55), weak ≥ WEAK_AT (0.3), else unsupported. Tried on the
cases of tests/unit/chat/test_grounding.py (passages from docs/users-and-roles.md): copies score 1.0;
faithful paraphrases 0.37-1.0, those reusing the passage's key terms ≥ 0.57, those in other words
("stays valid for a day", "create accounts") 0.37-0.43, so weak; sentences about something else
citing the passage 0-0.29; a changed number 0.36 (weak).

What a lexical measure cannot catch: negation ("never"/"not" are stopwords, so "Cairn stores the
password" matches "Cairn never stores a password"), swapped roles ("A waits for B" vs "B waits for
A"), a changed quantity written in words, and true paraphrases sharing few words with the passage
(weak or unsupported). A cited sentence with no content word at all scores 0.

Aggregation: a sentence's verdict compares it with the union of the passages it cites (several
passages may back one sentence together); a citation's verdict is its *worst* sentence compared
with that passage alone, because one unsupported claim is what a reader must see, and a best-of
would hide it behind an easy one. The summary counts citations by verdict; its score is the mean
over cited sentences of 1 (supported), 0.5 (weak) or 0 (unsupported).
"""
from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Literal

from services.chat.chunks import RetrievedChunk
from services.chat.citations import Citation, prose_and_code
from services.chat.text_terms import terms_of

Verdict = Literal["supported", "weak", "unsupported"]

SUPPORTED_AT = 0.55
WEAK_AT = 0.3
METHOD = "lexical: 0.8 idf-weighted term coverage + 0.2 bigram coverage, halved for a missing number"
_TERM_SHARE = 0.8
_MISSING_NUMBER_FACTOR = 0.5
_CREDIT: dict[Verdict, float] = {"supported": 1.0, "weak": 0.5, "unsupported": 0.0}

# The plain [n] / [n, m] that resolve_citations writes. Passages count from 1, and a bracket before "(" is a
# link: "[0, 1]" and "[1](url)", which it leaves as written, are no citation.
_MARKER = re.compile(r"\[([1-9]\d*(?:\s*,\s*[1-9]\d*)*)\](?!\()")
# A sentence ends at . ! or ? with the markers written after it ("Run it. [1]"), before whitespace
# that is not followed by a lower-case letter (so "e.g. the flag" stays one sentence), or at the end;
# or at a full-width 。！？ (Chinese, Japanese), which no space follows.
_SENTENCE_END = re.compile(
    r"[.!?](?:[ \t]*\[\d+(?:\s*,\s*\d+)*\])*(?=\s*$|\s+(?![a-z]))|[。！？](?:[ \t]*\[\d+(?:\s*,\s*\d+)*\])*"
)
_HEADING = re.compile(r"^#{1,6}\s+")
_LIST_MARK = re.compile(r"^(?:[-*+>]|\d+[.)])\s+")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([.,;:!?。，、；：！？])")


@dataclass(frozen=True)
class SentenceSupport:
    text: str  # markers removed
    numbers: tuple[int, ...]  # citation numbers it carries, in order
    verdict: Verdict
    score: float  # against the union of its cited passages


@dataclass(frozen=True)
class CitationSupport:
    """One citation's verdict: its worst sentence against this passage alone."""

    number: int
    verdict: Verdict
    score: float
    sentences: int  # how many sentences cite it


@dataclass(frozen=True)
class Grounding:
    score: float  # 0..1: mean over cited sentences, weak counting half
    supported: int  # citations by verdict
    weak: int
    unsupported: int
    method: str

    @property
    def cited(self) -> int:
        """How many citations were checked."""
        return self.supported + self.weak + self.unsupported


@dataclass(frozen=True)
class GroundingReport:
    summary: Grounding
    citations: dict[int, CitationSupport]  # by citation number
    sentences: list[SentenceSupport]


@dataclass(frozen=True)
class _Evidence:
    terms: frozenset[str]
    bigrams: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, text: str) -> _Evidence:
        terms = terms_of(text)
        return cls(frozenset(terms), frozenset(zip(terms, terms[1:])))

    def __or__(self, other: _Evidence) -> _Evidence:
        return _Evidence(self.terms | other.terms, self.bigrams | other.bigrams)


def verdict_of(score: float) -> Verdict:
    return "supported" if score >= SUPPORTED_AT else "weak" if score >= WEAK_AT else "unsupported"


def cited_sentences(answer: str) -> list[tuple[str, tuple[int, ...]]]:
    """(text without markers, citation numbers) of each sentence of `answer` that carries a marker.

    Lines are split first (list items, paragraphs), then sentences; a line holding only markers
    belongs to the sentence before it. Brackets in code (`items[1]`) are the code's, not markers.
    Markers on a Markdown heading cite the section under it: each sentence there without markers of its
    own carries them, and the heading, a title rather than a claim, is checked only when none does."""
    pieces: list[tuple[str, list[int]]] = []
    section: list[int] = []
    heading: tuple[str, list[int]] | None = None
    in_fence = False
    for line in _without_markers_in_code(answer).splitlines():
        line = line.strip()
        if line.startswith(("```", "~~~")):
            in_fence = not in_fence
        if _HEADING.match(line) and not in_fence:
            section = _marker_numbers(line)
            heading = (_without_markers(_HEADING.sub("", line)), section) if section else None
            if heading:
                pieces.append(heading)
            continue
        line = _LIST_MARK.sub("", line)
        start = 0
        for end in [m.end() for m in _SENTENCE_END.finditer(line)] + [len(line)]:
            piece = line[start:end]
            start = end
            numbers = _marker_numbers(piece)
            text = _without_markers(piece)
            if section and not numbers and not in_fence and any(ch.isalnum() for ch in text):
                numbers = list(section)
                if heading is not None:
                    pieces.remove(heading)
                    heading = None
            if not any(ch.isalnum() for ch in text) and numbers and pieces:
                pieces[-1][1].extend(numbers)
            elif text or numbers:
                pieces.append((text, numbers))
    return [(text, tuple(dict.fromkeys(numbers))) for text, numbers in pieces if numbers]


def _marker_numbers(text: str) -> list[int]:
    return [int(n) for m in _MARKER.finditer(text) for n in m.group(1).split(",")]


def _without_markers_in_code(answer: str) -> str:
    return "".join(_MARKER.sub("", part) if i % 2 else part for i, part in enumerate(prose_and_code(answer)))


def _without_markers(text: str) -> str:
    text = " ".join(_MARKER.sub(" ", text).split())
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text)


def term_weights(term_sets: Sequence[frozenset[str]]) -> dict[str, float]:
    """Smoothed IDF of every term over the passages' `term_sets`; a term none has weighs 1 + ln(N + 1)."""
    document_frequency = Counter(term for terms in term_sets for term in terms)
    n = len(term_sets)
    return {term: 1 + math.log((n + 1) / (df + 1)) for term, df in document_frequency.items()}


def support_score(sentence: str, evidence: _Evidence, *, weights: dict[str, float], unseen_weight: float) -> float:
    """How well `evidence` backs `sentence`, 0..1 (see the module docstring)."""
    terms = terms_of(sentence)
    distinct = set(terms)
    if not distinct:
        return 0.0
    total = sum(weights.get(t, unseen_weight) for t in distinct)
    coverage = sum(weights.get(t, unseen_weight) for t in distinct if t in evidence.terms) / total
    bigrams = set(zip(terms, terms[1:]))
    phrase = len(bigrams & evidence.bigrams) / len(bigrams) if bigrams else coverage
    score = _TERM_SHARE * coverage + (1 - _TERM_SHARE) * phrase
    if any(t.isdigit() and t not in evidence.terms for t in distinct):
        score *= _MISSING_NUMBER_FACTOR
    return round(score, 3)


def check_grounding(
    answer: str, citations: list[Citation], *, passages: Sequence[RetrievedChunk] = ()
) -> GroundingReport:
    """Support verdicts for the cited sentences of `answer`, per sentence and per citation.

    `passages`: every passage given to the model, for the term weights (the cited ones are always
    included). Markers whose number is not among `citations` are ignored."""
    cited = [passage for c in citations for passage in c.cited_passages]
    by_chunk = {c.chunk_id: _Evidence.of(c.content) for c in [*passages, *cited]}
    # A number shared by several passages of one page stands for all of them.
    evidence = {c.number: reduce(operator.or_, (by_chunk[p.chunk_id] for p in c.cited_passages)) for c in citations}
    weights = term_weights([e.terms for e in by_chunk.values()])
    unseen = 1 + math.log(len(by_chunk) + 1)
    sentences: list[SentenceSupport] = []
    per_citation: dict[int, list[float]] = {}
    for text, marked in cited_sentences(answer):
        numbers = tuple(n for n in marked if n in evidence)
        if not numbers:
            continue
        for number in numbers:
            alone = support_score(text, evidence[number], weights=weights, unseen_weight=unseen)
            per_citation.setdefault(number, []).append(alone)
        together = reduce(operator.or_, (evidence[n] for n in numbers))
        score = support_score(text, together, weights=weights, unseen_weight=unseen)
        sentences.append(SentenceSupport(text=text, numbers=numbers, verdict=verdict_of(score), score=score))
    by_citation = {
        number: CitationSupport(number, verdict_of(min(scores)), min(scores), len(scores))
        for number, scores in sorted(per_citation.items())
    }
    return GroundingReport(summary=_summary(sentences, by_citation), citations=by_citation, sentences=sentences)


def _summary(sentences: list[SentenceSupport], citations: dict[int, CitationSupport]) -> Grounding:
    verdicts = [c.verdict for c in citations.values()]
    score = sum(_CREDIT[s.verdict] for s in sentences) / len(sentences) if sentences else 0.0
    return Grounding(
        score=round(score, 3),
        supported=verdicts.count("supported"),
        weak=verdicts.count("weak"),
        unsupported=verdicts.count("unsupported"),
        method=METHOD,
    )
