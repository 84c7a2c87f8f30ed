"""The one record every parser returns."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Format = Literal["markdown", "text", "html", "pdf"]
# The most text one document holds: what POST /documents takes as JSON, and what a PDF may unpack to.
MAX_DOCUMENT_CHARS = 10_000_000


@dataclass(frozen=True)
class ParsedDocument:
    """Text ready for the chunker.

    `markdown`: lines written as `# heading` structure the text into sections.
    `page_starts`: the offset in `text` where each page begins (page 1 first); empty for formats without pages.
    `section_starts`: (offset, heading path) where each section begins, for formats whose structure the
    parser knows rather than the chunker reading it from markdown headings (a PDF's outline, an HTML
    page's headings); empty otherwise.
    `code_blocks`: (start, end) of each code block the parser wrote (an HTML page's <pre>, fences included), kept
    in one chunk when it fits; markdown's own are found by the chunker.
    """

    text: str
    format: Format
    title: str | None = None
    markdown: bool = False
    page_starts: tuple[int, ...] = ()
    section_starts: tuple[tuple[int, str], ...] = ()
    code_blocks: tuple[tuple[int, int], ...] = ()

    @property
    def pages(self) -> int | None:
        return len(self.page_starts) or None
