"""PDF with pypdf: one text per page, joined, with each page's start offset kept."""
from __future__ import annotations

import io
import logging

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from services.retrieval.errors import UnprocessableDocument
from services.retrieval.parsing.document import ParsedDocument

log = logging.getLogger("cairn.retrieval.parsing")
PAGE_SEPARATOR = "\n\n"


def _page_text(raw: str) -> str:
    lines = [line.rstrip() for line in raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip()


def parse_pdf(filename: str, data: bytes) -> ParsedDocument:
    if not data.strip():
        raise UnprocessableDocument(f"{filename}: the file is empty")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnprocessableDocument(f"{filename}: the PDF is encrypted")
        pages = [_page_text(page.extract_text() or "") for page in reader.pages]
        title = (reader.metadata.title if reader.metadata else None) or None
    except UnprocessableDocument:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError) as exc:
        # pypdf reports damage through many exception types; any of them means we cannot read this file.
        log.info("unreadable pdf", extra={"file": filename, "error": type(exc).__name__, "detail": str(exc)[:200]})
        raise UnprocessableDocument(f"{filename}: not a readable PDF ({type(exc).__name__})") from None
    if not any(pages):
        raise UnprocessableDocument(f"{filename}: the PDF has no extractable text (a scan without OCR?)")
    starts, offset = [], 0
    for text in pages:
        starts.append(offset)
        offset += len(text) + len(PAGE_SEPARATOR)
    return ParsedDocument(
        text=PAGE_SEPARATOR.join(pages),
        format="pdf",
        title=title.strip() if isinstance(title, str) and title.strip() else None,
        page_starts=tuple(starts),
    )
