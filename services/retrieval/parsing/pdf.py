"""PDF with pypdf: one text per page, without its running header and footer, joined, with each page's start
offset kept."""
from __future__ import annotations

import io
import logging
import re

from pypdf import PdfReader
from pypdf.errors import DependencyError, PyPdfError

from services.retrieval.errors import UnprocessableDocument
from services.retrieval.parsing.document import MAX_DOCUMENT_CHARS, ParsedDocument
from services.retrieval.parsing.ligatures import written_out
from services.retrieval.parsing.running_lines import without_running_lines
from shared.json_types import NUL, is_blank

log = logging.getLogger("cairn.retrieval.parsing")
PAGE_SEPARATOR = "\n\n"
# A word broken at a line end: "retrie-" + "val" on the next line. A soft hyphen is only ever a break point.
_LINE_END_HYPHEN = re.compile(r"(?<=[^\W\d_])-\n[ \t]*(?=[^\W\d_])")
_SOFT_HYPHEN = re.compile(r"\u00ad(?:\n[ \t]*)?")


def _joined_if_lower(match: re.Match[str]) -> str:
    """The hyphen and line break dropped before a lower-case letter ("retrie-|val"), kept before a capital
    ("Hewlett-|Packard"). A compound broken at its own hyphen ("well-|known") loses the hyphen too: justified
    text breaks far more words that have none."""
    return "" if match.string[match.end()].islower() else match.group()


def _whole_characters(text: str) -> str:
    """A broken font map gives a glyph half a UTF-16 surrogate pair (pypdf keeps it): two halves in a row are
    one character, a half alone becomes U+FFFD. Left in, the text could not be encoded to be stored (a 500)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _shown(text: str) -> str:
    """`text` without U+0000, which no text Cairn stores holds (shared.json_types.NUL): pypdf can give it for a glyph
    that the font maps to no character. It shows nothing, so the PDF is read without it, where a text file holding it
    is refused as binary."""
    return text.replace(NUL, "") if NUL in text else text


def _page_text(raw: str) -> str:
    raw = _shown(_whole_characters(raw))
    lines = [line.rstrip() for line in raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    text = _LINE_END_HYPHEN.sub(_joined_if_lower, written_out("\n".join(lines)))
    return _SOFT_HYPHEN.sub("", text).strip()


def parse_pdf(filename: str, data: bytes) -> ParsedDocument:
    if not data.strip():
        raise UnprocessableDocument(f"{filename}: the file is empty")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnprocessableDocument(f"{filename}: the PDF is encrypted")
        pages = without_running_lines(_page_texts(reader, filename))
        title = reader.metadata.title if reader.metadata else None
        title = _shown(title) if isinstance(title, str) else None
        outline = _outline(reader)
    except UnprocessableDocument:
        raise
    except DependencyError:
        # AES needs the cryptography package, even for a PDF that opens without a password.
        log.warning("pdf needs the cryptography package", extra={"file": filename})
        raise UnprocessableDocument(
            f"{filename}: the PDF is encrypted with AES, which this service cannot decrypt (the cryptography "
            "package is not installed)"
        ) from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError) as exc:
        # pypdf reports damage through many exception types; any of them means we cannot read this file.
        log.info("unreadable pdf", extra={"file": filename, "error": type(exc).__name__, "detail": str(exc)[:200]})
        raise UnprocessableDocument(f"{filename}: not a readable PDF ({type(exc).__name__})") from None
    if not pages:
        raise UnprocessableDocument(f"{filename}: the PDF has no pages")
    if all(is_blank(text) for text in pages):
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
        section_starts=_locate(outline, PAGE_SEPARATOR.join(pages), pages, starts),
    )


def _only_the_heading(between: str, path: str) -> bool:
    return " ".join(between.split()).casefold() in ("", path.rsplit(" > ", 1)[-1].casefold())


def _page_texts(reader: PdfReader, filename: str) -> list[str]:
    """Each page's text, refused once they add up to more than MAX_DOCUMENT_CHARS: a few hundred KB of compressed
    text streams can unpack to a hundred million characters, hours of embedding (pypdf bounds each stream only)."""
    pages, total = [], 0
    for page in reader.pages:
        pages.append(_page_text(page.extract_text() or ""))
        total += len(pages[-1])
        if total > MAX_DOCUMENT_CHARS:
            raise UnprocessableDocument(
                f"{filename}: the PDF holds more than {MAX_DOCUMENT_CHARS:,} characters of text, the most one document may"
            )
    return pages


def _outline(reader: PdfReader) -> list[tuple[int, str]]:
    """(page index, heading path) of each bookmark, in document order; [] when the outline is unusable."""
    found: list[tuple[int, str]] = []

    def walk(items: list, parents: list[str]) -> None:
        last: str | None = None
        for item in items:
            if isinstance(item, list):
                walk(item, [*parents, last] if last else parents)
                continue
            last = " ".join(written_out(_shown(str(item.title or ""))).split())
            page = reader.get_destination_page_number(item)
            if last and page is not None and page >= 0:
                found.append((page, " > ".join([*parents, last])))

    try:
        walk(reader.outline, [])
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
        return []  # sections are a bonus: a broken outline does not make the text unreadable
    return sorted(found, key=lambda entry: entry[0])


def _locate(
    outline: list[tuple[int, str]], text: str, pages: list[str], starts: list[int]
) -> tuple[tuple[int, str], ...]:
    """Offsets of the outline's sections: where the heading appears on its page (after the previous
    heading), else the start of that page; ascending. A heading with nothing under it but the next one opens
    the next one's section, as in Markdown: else its title alone would be a chunk."""
    located: list[tuple[int, str]] = []
    for page, path in outline:
        if page >= len(pages):
            continue
        previous = located[-1][0] if located else 0
        search_from = previous - starts[page] + 1 if previous >= starts[page] and located else 0
        at = pages[page].find(path.rsplit(" > ", 1)[-1], search_from)
        offset = max(starts[page] + (at if at >= 0 else max(search_from - 1, 0)), previous)
        if located and offset == previous:
            located[-1] = (offset, path)  # two bookmarks at one place: the later (deeper) one names it
        elif located and _only_the_heading(text[previous:offset], located[-1][1]):
            located[-1] = (previous, path)
        else:
            located.append((offset, path))
    return tuple(located)
