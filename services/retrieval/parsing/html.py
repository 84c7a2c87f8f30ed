"""HTML to markdown-like text: headings become `#` lines so the chunker sees sections; page furniture
(scripts, styles, navigation) is dropped. Character spans of chunks refer to this text, not the HTML."""
from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

from services.retrieval.errors import UnprocessableDocument
from services.retrieval.parsing.document import ParsedDocument

_DROP = {"script", "style", "nav", "noscript", "template", "svg", "canvas", "iframe", "object", "head"}
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "li", "main", "ol", "p",
    "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "ul",
}
_SPACE = re.compile(r"[ \t\r\n\f\v\u00a0]+")
# A paragraph that happens to start like a markdown heading must not open a section.
_LOOKS_LIKE_HEADING = re.compile(r"^(#{1,6})(?=[ \t])", re.MULTILINE)
_SKIPPED = (Comment, Declaration, Doctype, ProcessingInstruction)


class _Writer:
    def __init__(self) -> None:
        self.blocks: list[str] = []
        self._line: list[str] = []

    def text(self, value: str) -> None:
        self._line.append(value)

    def flush(self, prefix: str = "") -> None:
        lines = [_SPACE.sub(" ", line).strip() for line in "".join(self._line).split("\n")]
        body = "\n".join(line for line in lines if line)
        if body:
            self.blocks.append(prefix + _LOOKS_LIKE_HEADING.sub(r"\\\1", body))
        self._line = []

    def block(self, value: str) -> None:
        self.flush()
        if value.strip():
            self.blocks.append(value)


def _walk(node: Tag, out: _Writer) -> None:
    for child in node.children:
        if isinstance(child, _SKIPPED):
            continue
        if isinstance(child, NavigableString):
            out.text(str(child))
            continue
        if not isinstance(child, Tag) or child.name in _DROP:
            continue
        name = child.name
        if name in _HEADINGS:
            out.flush()
            heading = _SPACE.sub(" ", child.get_text(" ")).strip()
            if heading:
                out.block("#" * _HEADINGS[name] + " " + heading)
        elif name == "pre":
            # Fenced, so '#' lines in code are not taken for headings.
            out.block("```\n" + child.get_text().strip("\n") + "\n```")
        elif name == "br":
            out.text("\n")
        elif name == "li":
            out.flush()
            _walk(child, out)
            out.flush(prefix="- ")
        elif name == "tr":
            cells = [_SPACE.sub(" ", cell.get_text(" ")).strip() for cell in child.find_all(["td", "th"], recursive=False)]
            out.block(" | ".join(cells))
        elif name in _BLOCKS:
            out.flush()
            _walk(child, out)
            out.flush()
        else:
            _walk(child, out)


def parse_html(filename: str, data: bytes) -> ParsedDocument:
    if not data.strip():
        raise UnprocessableDocument(f"{filename}: the file is empty")
    soup = BeautifulSoup(data, "html.parser")
    title_tag = soup.find("title")
    title = _SPACE.sub(" ", title_tag.get_text(" ")).strip() if title_tag else ""
    if not title and (h1 := soup.find("h1")):
        title = _SPACE.sub(" ", h1.get_text(" ")).strip()
    out = _Writer()
    _walk(soup.body or soup, out)
    out.flush()
    text = "\n\n".join(out.blocks)
    if not text.strip():
        raise UnprocessableDocument(f"{filename}: no text found in the HTML")
    return ParsedDocument(text=text, format="html", title=title or None, markdown=True)
