"""Ligature characters (ﬁ, ﬂ, ﬃ, ...) written out in their letters, in every format: "ﬁle" matched neither a
keyword search for "file" nor the embedding model's vocabulary. Parsers apply it before they place any offset,
so that chunk spans, page starts and section starts all refer to the written-out text."""
from __future__ import annotations

import unicodedata

# The Latin ligatures U+FB00 to U+FB06: ff, fi, fl, ffi, ffl, long s + t, st.
_LIGATURES = str.maketrans({code: unicodedata.normalize("NFKC", chr(code)) for code in range(0xFB00, 0xFB07)})


def written_out(text: str) -> str:
    return text.translate(_LIGATURES)
