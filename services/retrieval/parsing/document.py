"""The one record every parser returns."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Format = Literal["markdown", "text", "html", "pdf"]


@dataclass(frozen=True)
class ParsedDocument:
    """Text ready for the chunker.

    `markdown`: lines written as `# heading` structure the text into sections.
    `page_starts`: the offset in `text` where each page begins (page 1 first); empty for formats without pages.
    """

    text: str
    format: Format
    title: str | None = None
    markdown: bool = False
    page_starts: tuple[int, ...] = ()

    @property
    def pages(self) -> int | None:
        return len(self.page_starts) or None
