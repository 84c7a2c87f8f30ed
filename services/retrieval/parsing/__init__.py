"""Turn an uploaded file into text for the chunker: `parse(filename, data)`, chosen by file type."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath

from services.retrieval.errors import UnsupportedMediaType
from services.retrieval.parsing.document import Format, ParsedDocument
from services.retrieval.parsing.html import parse_html
from services.retrieval.parsing.pdf import parse_pdf
from services.retrieval.parsing.text import parse_markdown, parse_text

__all__ = ["ParsedDocument", "Format", "SUPPORTED_SUFFIXES", "SUPPORTED_MEDIA_TYPES", "format_of", "parse"]

_PARSERS: dict[Format, Callable[[str, bytes], ParsedDocument]] = {
    "markdown": parse_markdown,
    "text": parse_text,
    "html": parse_html,
    "pdf": parse_pdf,
}
_BY_SUFFIX: dict[str, Format] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}
_BY_MEDIA_TYPE: dict[str, Format] = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
}
SUPPORTED_SUFFIXES = frozenset(_BY_SUFFIX)
SUPPORTED_MEDIA_TYPES = tuple(_BY_MEDIA_TYPE)


def format_of(filename: str, media_type: str | None = None) -> Format | None:
    """The format named by the file's suffix, else by its media type (for names without a known suffix)."""
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if suffix in _BY_SUFFIX:
        return _BY_SUFFIX[suffix]
    if suffix or not media_type:
        return None
    return _BY_MEDIA_TYPE.get(media_type.split(";")[0].strip().lower())


def parse(filename: str, data: bytes, *, media_type: str | None = None) -> ParsedDocument:
    """Text, title and page offsets of one file.

    Raises UnsupportedMediaType (415) for a type we cannot read and UnprocessableDocument (422) for a
    corrupt or empty file; both messages name the file.
    """
    kind = format_of(filename, media_type)
    if kind is None:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UnsupportedMediaType(f"{filename}: unsupported file type; supported: {supported}")
    return _PARSERS[kind](filename, data)
