"""Extractive answering: the context sentences most similar to the question, each cited as [n].

Similarity of a sentence to the question is the IDF-weighted share of the question's content terms
the sentence contains (0..1), the IDF taken over all sentences of the context, so a question term
no passage contains counts fully against every sentence. "How do I scale retrieval?" scores a
sentence with "scale" and "retrieval" 1.0, one with only the common "retrieval" about 0.3. Up to
MAX_SENTENCES sentences within _KEEP_RATIO of the best are kept; when together they cover less than
MIN_SIMILARITY of the question the answer is INSUFFICIENT, so an off-topic question that shares one
common word with the documents gets no answer, while a two-part question answered by two sentences
(each covering half of it) does. The ranking also prefers short sentences and earlier passages; the
answer lists the chosen sentences passage by passage (best passage first), each in its text's order.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from services.chat.context_format import ContextBlock
from services.chat.text_terms import stem, terms_of

__all__ = [
    "INSUFFICIENT", "MAX_SENTENCES", "MIN_SIMILARITY", "Sentence", "answer", "candidate_sentences", "cite",
    "question_weights", "similarity", "split_sentences", "stem", "terms_of",
]

# Worded so that citations.lacks_information recognises it and the pipeline shows its fallback.
INSUFFICIENT = "I don't have enough information in the documents to answer that."
MAX_SENTENCES = 3
# Chosen on docs/*.md, 8 passages per question (bench/chat_grounding.py's stand-in retrieval): of 34
# questions the docs answer, the chosen sentences covered 0.60 ("How long does a token last?") to 1.0
# (28 of them); of 19 they do not, 16 covered 0 to 0.52 ("Which Python version is required?": python
# and version occur, in different sentences). Three pass because all their words occur in the docs
# ("What time is it?", "How do I train a model?"): a lexical measure cannot tell those apart.
MIN_SIMILARITY = 0.55
_KEEP_RATIO = 0.7  # a further sentence must reach this share of the best similarity
_K1, _B = 1.2, 0.75
_RANK_DECAY = 0.05  # passages come best first: a sentence of passage n ranks as similarity / (1 + 0.05 (n - 1))
_NEAR_DUPLICATE = 0.75  # Jaccard of term sets above which two sentences say the same thing
# Words that shape a question without naming its subject.
_QUESTION_WORDS = frozenset(stem(w) for w in "tell explain describe please know want way happen possible".split())
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")


@dataclass(frozen=True)
class Sentence:
    text: str
    source: int  # the passage number
    position: int  # order within the context
    terms: frozenset[str]


def split_sentences(text: str) -> list[str]:
    """Sentences of a markdown passage: wrapped lines joined, headings, tables and code blocks left
    out, each list item its own unit."""
    sentences: list[str] = []
    for unit in _prose_units(text):
        sentences.extend(part.strip() for part in _SENTENCE_SPLIT.split(unit) if _is_sentence(part.strip()))
    return sentences


def _is_sentence(text: str) -> bool:
    # An unpunctuated tail is often a passage cut mid-sentence by chunking: ask more of it.
    return len(text.split()) >= (3 if text[-1:] in ".!?:)`\"'" else 5)


def _prose_units(text: str) -> list[str]:
    units: list[str] = []
    current: list[str] = []
    in_code = False

    def flush() -> None:
        if current:
            units.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_code = not in_code
            flush()
            continue
        if in_code or not stripped or stripped.startswith(("#", "|")) or set(stripped) <= set("-=*_ "):
            flush()
            continue
        if _LIST_MARK.match(stripped):
            flush()
            stripped = _LIST_MARK.sub("", stripped)
        current.append(stripped)
    flush()
    return units


def candidate_sentences(blocks: list[ContextBlock]) -> list[Sentence]:
    """The sentences of every block, in order; one ending in ":" is left out (it announces a list or
    code block that an answer made of sentences would not show)."""
    texts = [(b.number, text) for b in blocks for text in split_sentences(b.text) if not text.endswith(":")]
    return [Sentence(text, number, i, frozenset(terms_of(text))) for i, (number, text) in enumerate(texts)]


def question_weights(question: str, sentences: list[Sentence]) -> dict[str, float]:
    """IDF (BM25 form, always > 0) over `sentences` of each content term of the question."""
    query = {t for t in terms_of(question) if t not in _QUESTION_WORDS}
    df = Counter(term for s in sentences for term in s.terms & query)
    n = len(sentences)
    return {term: math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in query}


def similarity(weights: dict[str, float], terms: frozenset[str]) -> float:
    """IDF-weighted share of the question's terms found in `terms`, 0..1."""
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in terms) / total if total else 0.0


def answer(question: str, blocks: list[ContextBlock]) -> str:
    """Up to MAX_SENTENCES distinct sentences most similar to `question`, each followed by [n];
    INSUFFICIENT when together they cover less than MIN_SIMILARITY of the question."""
    sentences = candidate_sentences(blocks)
    weights = question_weights(question, sentences)
    if not sentences or not weights:
        return INSUFFICIENT
    chosen = _chosen(_ranked(weights, sentences))
    covered = frozenset().union(*(s.terms for s in chosen))
    if similarity(weights, covered) < MIN_SIMILARITY:
        return INSUFFICIENT
    return " ".join(cite(s.text, s.source) for s in _reading_order(chosen))


def _chosen(ranked: list[tuple[float, Sentence]]) -> list[Sentence]:
    """The first MAX_SENTENCES ranked sentences within _KEEP_RATIO of the best, near-duplicates skipped."""
    floor = max(value for value, _ in ranked) * _KEEP_RATIO
    chosen: list[Sentence] = []
    for value, sentence in ranked:
        if len(chosen) == MAX_SENTENCES:
            break
        if value > 0 and value >= floor and not any(_repeats(sentence, other) for other in chosen):
            chosen.append(sentence)
    return chosen


def _ranked(weights: dict[str, float], sentences: list[Sentence]) -> list[tuple[float, Sentence]]:
    """(similarity, sentence) best first. The order also favours shorter sentences (BM25's length
    normalisation: a sentence of average length keeps its similarity, one twice as long about 0.7 of
    it), so among sentences covering the question the focused one wins, and earlier passages."""
    average = sum(len(s.terms) for s in sentences) / len(sentences) or 1.0

    def rank(pair: tuple[float, Sentence]) -> tuple[float, int]:
        value, sentence = pair
        length = (_K1 + 1) / (1 + _K1 * (1 - _B + _B * len(sentence.terms) / average))
        return -value * length / (1 + _RANK_DECAY * (sentence.source - 1)), sentence.position

    return sorted(((similarity(weights, s.terms), s) for s in sentences), key=rank)


def _repeats(a: Sentence, b: Sentence) -> bool:
    """True when one sentence says nothing the other does not: a subset of its terms, or nearly the same."""
    if a.terms <= b.terms or b.terms <= a.terms:
        return True
    return len(a.terms & b.terms) / len(a.terms | b.terms) >= _NEAR_DUPLICATE


def _reading_order(chosen: list[Sentence]) -> list[Sentence]:
    """Passages in the order of their best chosen sentence; inside a passage, the text's own order
    (so "The command ..." still follows the sentence that names the command)."""
    passage_rank = {s.source: i for i, s in reversed(list(enumerate(chosen)))}
    return sorted(chosen, key=lambda s: (passage_rank[s.source], s.position))


def cite(sentence: str, number: int) -> str:
    """`Some text [1].`: the marker goes before the closing punctuation."""
    if sentence[-1] in ".!?":
        return f"{sentence[:-1]} [{number}]{sentence[-1]}"
    return f"{sentence} [{number}]"
