"""Content terms of text, shared by the offline generator and the grounding check.

A term is a lower-cased run of letters or digits of any script (`SESSION_TTL_SECONDS` gives session,
ttl, second), English stopwords and contraction stubs left out, passed through a light English suffix
stemmer; Chinese, Japanese and Korean give pairs of adjacent characters (shared/cjk.py). Plain Python:
chat carries no stemming library, and both users need only "the same word in another form" to match.
"up", "down", "out" and "off" are not stopwords here: they carry meaning (`cairn up`, Redis is down).
"""
from __future__ import annotations

import re
from functools import lru_cache

import regex

from shared.cjk import folded, split_cjk

STOPWORDS = frozenset(
    """a about above after again all also am an and any are as at be because been before being below between
    both but by can could did do does doing during each few for from further had has have having he her
    here hers him his how i if in into is it its itself just let me more most my no nor not now of on once
    only or other our ours over own same she should so some such than that the their theirs them then
    there these they this those through to too under until very was we were what when where which while
    who whom why will with would you your yours
    whose whatever whoever whichever whenever wherever whether either neither else may might must shall
    myself yourself yourselves himself herself ourselves themselves
    s t d ll m re ve don doesn didn isn aren wasn weren won wouldn couldn shouldn cannot""".split()
)
# Letters and digits of any script. The regex module's \w, unlike re's, takes in combining marks: the vowel
# signs and viramas inside every Devanagari, Bengali or Tamil word (as the keyword index reads words). re,
# the same for ASCII text, reads that in about half the time.
_WORD = regex.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"[^\W_]+", re.ASCII)
_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s")
_MIN_STEM = 3


@lru_cache(maxsize=100_000)  # a word is stemmed once: the same few thousand words recur in every request
def stem(word: str) -> str:
    """Strip one inflection suffix, then a final "e", so that store / stores / stored / storing agree."""
    for suffix in _SUFFIXES:
        if not word.endswith(suffix):
            continue
        if len(word) - len(suffix) < _MIN_STEM:
            if suffix == "ed" and len(word) > _MIN_STEM and word[-3] != "e":  # used -> use, but need stays
                return word[:-1]
            continue
        if suffix == "s" and word[-2] in "siu":  # process, analysis, status: not plurals
            return word
        if suffix in ("ies", "ied"):
            return word[: -len(suffix)] + "y"
        return _drop_final_e(word[: -len(suffix)])
    return _drop_final_e(word)


def _drop_final_e(word: str) -> str:
    return word[:-1] if word.endswith("e") and len(word) > _MIN_STEM else word


def terms_of(text: str) -> list[str]:
    """Stemmed content terms of `text`, in order (repeats kept); Chinese, Japanese and Korean runs give
    pairs of adjacent characters instead (shared/cjk.py), after the other words."""
    rest, cjk_terms = split_cjk(folded(text))
    words = (_ASCII_WORD if rest.isascii() else _WORD).findall(rest)
    return [stem(w) for w in words if w not in STOPWORDS] + cjk_terms
