"""Markdown and plain text: UTF-8 bytes, taken as they are, or UTF-16 that says so with a byte-order mark."""
from __future__ import annotations

import codecs

from services.retrieval.chunking import document_title, front_matter_end
from services.retrieval.errors import UnprocessableDocument
from services.retrieval.parsing.document import ParsedDocument
from services.retrieval.parsing.ligatures import written_out
from shared.json_types import NUL, NUL_CHARACTERS, is_blank


def decode(filename: str, data: bytes) -> str:
    """UTF-8 text (a leading BOM dropped), or UTF-16 behind its BOM (what Windows' Notepad "Unicode" and
    PowerShell's `>` write), refusing binary or empty content. Without a BOM no other encoding is guessed.
    Ligatures are written out."""
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        raise UnprocessableDocument(f"{filename}: not {'UTF-16' if encoding == 'utf-16' else 'UTF-8'} text") from None
    if NUL in text:
        raise UnprocessableDocument(f"{filename}: binary content, not text: it holds {NUL_CHARACTERS}")
    if is_blank(text):  # whitespace, or characters shown as nothing (zero-width spaces, byte-order marks)
        raise UnprocessableDocument(f"{filename}: the file is empty")
    return written_out(text)


def parse_markdown(filename: str, data: bytes) -> ParsedDocument:
    text = decode(filename, data)
    if is_blank(text[front_matter_end(text) :]):
        raise UnprocessableDocument(f"{filename}: no text after its front matter")
    title = document_title(text, fallback="") or None
    return ParsedDocument(text=text, format="markdown", title=title, markdown=True)


def parse_text(filename: str, data: bytes) -> ParsedDocument:
    return ParsedDocument(text=decode(filename, data), format="text")
