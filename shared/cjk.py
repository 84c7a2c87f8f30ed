"""Words of scripts written without spaces between them (Chinese, Japanese) and of Korean, as the
keyword index and the grounding check see them: overlapping pairs of characters.

A run such as 东京大学的研究 has no word boundaries to split on; a regex word pattern would take the
whole run as one "word", so no query word inside it could ever match. Pairs of adjacent characters
(东京 京大 大学 学的 的研 研究) are the usual dictionary-free answer (Lucene's CJK bigrams): a two-character
word of the query is found wherever it occurs, and a longer one matches pair by pair. A run of one
character stays one term. Korean separates words by spaces but glues particles to them
(서울에서 = 서울 + 에서), so its syllables are paired the same way.
"""
from __future__ import annotations

import re
import unicodedata

__all__ = ["CJK_RUN", "folded", "has_cjk", "pairs", "split_cjk"]

_CHARACTERS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana (with the prolonged sound mark ー)
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK unified ideographs, extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U0003134f"  # CJK unified ideographs, extensions B to G
)
CJK_RUN = re.compile(f"[{_CHARACTERS}]+")
_SOFT_HYPHEN = "\u00ad"


def has_cjk(text: str) -> bool:
    # isascii only reads a flag of the string; the search took a fifth of the time to read an English passage's terms
    return not text.isascii() and CJK_RUN.search(text) is not None


def pairs(run: str) -> list[str]:
    """Each two adjacent characters of `run`, in order; a single character on its own."""
    if len(run) < 2:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def folded(text: str) -> str:
    """`text` as the keyword index and the grounding check compare it: NFKC, then lower-cased. NFKC first: a
    decomposed accent (e + U+0301, as macOS and many PDFs write it) is no word character, so "résumé" would
    split into "re" and "sume"; full-width letters become the usual ones. Soft hyphens go: a web page's
    break points inside long words (&shy;), they would split "Bundes&shy;regierung" into two words."""
    return unicodedata.normalize("NFKC", text).replace(_SOFT_HYPHEN, "").lower()


def split_cjk(text: str) -> tuple[str, list[str]]:
    """`text` with its CJK runs blanked out (so "GPT模型" leaves the word "GPT"), and the runs' pairs."""
    if not has_cjk(text):
        return text, []
    return CJK_RUN.sub(" ", text), [pair for run in CJK_RUN.findall(text) for pair in pairs(run)]
