"""Extractive answering: the context sentences that best match the question, each cited as [n].

Scoring is BM25 over sentences with crude suffix stemming and English stopwords — plain Python.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from services.chat.context_format import ContextBlock

INSUFFICIENT = "The documents do not contain enough information to answer that."
MAX_SENTENCES = 3
_K1, _B = 1.2, 0.75
_KEEP_RATIO = 0.5  # a sentence must score at least this share of the best one to be used
_RANK_DECAY = 0.1  # passages come best first from retrieval: a sentence of passage n is worth 1 / (1 + 0.1 (n - 1))

_STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here
    hers him his how i if in into is it its itself just let me more most my no nor not now of off on once only
    or other our ours out over own same she should so some such than that the their theirs them then there
    these they this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours""".split()
)
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")


@dataclass(frozen=True)
class Sentence:
    text: str
    source: int
    terms: Counter[str]


def stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
    return word


def terms_of(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


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


def answer(question: str, blocks: list[ContextBlock]) -> str:
    """Up to MAX_SENTENCES distinct sentences that best match `question`, each followed by [n]."""
    sentences = [
        Sentence(text, block.number, Counter(terms_of(text)))
        for block in blocks
        for text in split_sentences(block.text)
    ]
    query = set(terms_of(question))
    if not sentences or not query:
        return INSUFFICIENT
    df = Counter(term for s in sentences for term in set(s.terms) if term in query)
    n = len(sentences)
    avg_len = sum(sum(s.terms.values()) for s in sentences) / n or 1.0

    def score(s: Sentence) -> float:
        length = sum(s.terms.values())
        total = 0.0
        for term in query & s.terms.keys():
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            tf = s.terms[term]
            total += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / avg_len))
        return total / (1 + _RANK_DECAY * (s.source - 1))

    ranked = sorted(((score(s), i, s) for i, s in enumerate(sentences)), key=lambda t: (-t[0], t[1]))
    best = ranked[0][0]
    if best <= 0:
        return INSUFFICIENT
    chosen: list[Sentence] = []
    for value, _, sentence in ranked:
        if value < best * _KEEP_RATIO or len(chosen) == MAX_SENTENCES:
            break
        if not any(_repeats(sentence, other) for other in chosen):
            chosen.append(sentence)
    return " ".join(cite(s.text, s.source) for s in chosen)


def _repeats(a: Sentence, b: Sentence) -> bool:
    """True when one sentence says nothing the other does not (same terms, or a subset)."""
    return a.terms.keys() <= b.terms.keys() or b.terms.keys() <= a.terms.keys()


def cite(sentence: str, number: int) -> str:
    """`Some text [1].`: the marker goes before the closing punctuation."""
    if sentence[-1] in ".!?":
        return f"{sentence[:-1]} [{number}]{sentence[-1]}"
    return f"{sentence} [{number}]"
