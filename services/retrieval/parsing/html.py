"""HTML to markdown-like text: headings are written as `#` lines and given to the chunker as section starts,
<pre> blocks as fenced code whose spans the chunker keeps whole when they fit; page furniture (scripts, styles,
navigation, the page's footer, drop-down lists), hidden elements and the head's metadata are dropped.
Character spans of chunks refer to this text, not the HTML."""
from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.dammit import EncodingDetector
from bs4.element import Comment, Declaration, Doctype, PageElement, ProcessingInstruction

from services.retrieval.chunking import Heading, sections_under
from services.retrieval.errors import UnprocessableDocument
from services.retrieval.parsing.document import ParsedDocument
from services.retrieval.parsing.ligatures import written_out
from shared.json_types import NUL, NUL_CHARACTERS, is_blank

# Not the head itself: with its end tag left out (valid HTML5), html.parser keeps the whole page inside it.
_DROP = {
    "script", "style", "nav", "noscript", "template", "svg", "canvas", "iframe", "object",
    "title", "meta", "link", "base",
    # A drop-down's choices (or an input's suggestions) are form furniture, and ran together ("smalllarge").
    "datalist", "option", "optgroup",
}
# Form controls drawn as boxes of their own: kept apart from the words around them ("Save Copy", not "SaveCopy").
# A <select> is one too, its options dropped.
_BOXES = {"button", "input", "select", "textarea"}
# Elements the reader never sees (the `hidden` attribute, except "until-found", which find-in-page reveals;
# an inline style that hides them), and page furniture marked by its role.
_HIDING_STYLE = re.compile(
    r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*hidden)\s*(?:!\s*important\s*)?(?:;|$)", re.IGNORECASE
)
_FURNITURE_ROLES = {"navigation", "contentinfo"}
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "head", "header", "hr", "html", "li", "main", "ol", "p",
    "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "ul",
}
# What a row of data never holds: a row with one of these lays out the page (legacy sites, HTML mail put the whole
# page in a table), and its cells are read as the page's blocks, not joined into one line.
_LAYOUT = {*_HEADINGS, "pre", "table"}
_SPACE = re.compile(r"[ \t\r\n\f\v\u00a0]+")
_SKIPPED = (Comment, Declaration, Doctype, ProcessingInstruction)
# The web's default for a page that declares no encoding, also read for pages labelled Latin-1 or ASCII
# (as browsers do): Latin-1 would turn their curly quotes, dashes and euro signs into control characters.
_WEB_DEFAULT = "cp1252"
_READ_AS_WEB_DEFAULT = {"iso8859-1", "ascii"}


class _Writer:
    """Blocks of text joined by blank lines, remembering where the heading blocks are: only those open
    sections, so a paragraph or table row that starts with '#' stays text (and is kept as written)."""

    SEPARATOR = "\n\n"

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.headings: list[Heading] = []
        self.code_blocks: list[tuple[int, int]] = []
        self._length = 0
        self._line: list[str] = []
        # A list item's "- ", for its first paragraph: the text in <li><p>text</p></li> is written by the <p>.
        self._marker = ""

    def text(self, value: str) -> None:
        self._line.append(value)

    def flush(self) -> None:
        lines = [_SPACE.sub(" ", line).strip() for line in "".join(self._line).split("\n")]
        body = "\n".join(line for line in lines if line)
        if body:
            self._append(self._marker + body)
        self._line = []

    def list_item(self) -> None:
        self.flush()
        self._marker = "- "

    def end_list_item(self) -> None:
        self.flush()
        self._marker = ""

    def block(self, value: str) -> None:
        self.flush()
        if value.strip():
            self._append(value)

    def code(self, fenced: str) -> None:
        self.flush()
        start = self._append(fenced)
        self.code_blocks.append((start, self._length))

    def heading(self, level: int, title: str) -> None:
        self.flush()
        start = self._append("#" * level + " " + title)
        self.headings.append(Heading(level, title, start, self._length))

    def joined(self) -> str:
        return self.SEPARATOR.join(self.blocks)

    def _append(self, block: str) -> int:
        self._marker = ""  # only an item's first block is marked; a heading or code block there stays as it is
        start = self._length + len(self.SEPARATOR) if self.blocks else 0
        self.blocks.append(block)
        self._length = start + len(block)
        return start


def _walk(root: Tag, out: _Writer) -> None:
    """Write the tree's text, depth first. With a stack of its own, not recursion: a page of thousands of nested
    elements (a legacy page's unclosed <p> or <font> tags nest in html.parser) went past Python's recursion limit."""
    # Per open element: its remaining children, and what to write once they are done.
    stack: list[tuple[Iterator[PageElement], Callable[[], None] | None]] = [(iter(root.children), None)]
    while stack:
        children, after = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if after is not None:
                after()
            continue
        if isinstance(child, _SKIPPED):
            continue
        if isinstance(child, NavigableString):
            out.text(_SPACE.sub(" ", str(child)))  # a line break in the source is a space; only <br> breaks a line
            continue
        if not isinstance(child, Tag) or child.name in _DROP or _unseen_or_furniture(child):
            continue
        name = child.name
        if name in _HEADINGS:
            out.flush()
            _drop_permalinks(child)
            if heading := _SPACE.sub(" ", child.get_text(" ")).strip():
                out.heading(_HEADINGS[name], heading)
        elif name == "pre":
            out.code(_fenced(_code_text(child).strip("\n")))
        elif name == "br":
            out.text("\n")
        elif name == "li":
            out.list_item()
            stack.append((iter(child.children), out.end_list_item))
        elif name == "tr" and not _lays_out(child):
            out.block(" | ".join(_cell_text(cell) for cell in child.find_all(["td", "th"], recursive=False)))
        elif name in _BOXES:
            out.text(" ")
            stack.append((iter(child.children), lambda: out.text(" ")))
        elif name in _BLOCKS:
            out.flush()
            stack.append((iter(child.children), out.flush))
        else:
            stack.append((iter(child.children), None))


def _lays_out(row: Tag) -> bool:
    """Whether the row holds a heading, code block or table. Searched to the first one found: Tag.find() walks the
    whole row first, which made a page of thousands of nested tables take quadratic time."""
    pending = list(row.children)
    while pending:
        element = pending.pop()
        if isinstance(element, Tag):
            if element.name in _LAYOUT:
                return True
            pending.extend(element.children)
    return False


def _cell_text(cell: Tag) -> str:
    """A table cell's text on one line, without what the page leaves out (scripts, hidden elements, a drop-down's
    choices, navigation): get_text() kept them. Blocks, line breaks and form controls are kept apart by a space."""
    parts: list[str] = []
    pending: list[PageElement | str] = [cell]
    while pending:
        element = pending.pop()
        if isinstance(element, _SKIPPED):
            continue
        if isinstance(element, str):  # a NavigableString, or the space written after a block
            parts.append(str(element))
            continue
        if not isinstance(element, Tag) or element.name in _DROP or _unseen_or_furniture(element):
            continue
        apart = element.name in _BLOCKS or element.name in _BOXES or element.name == "br"
        if apart:
            parts.append(" ")
            pending.append(" ")
        pending.extend(reversed(list(element.children)))
    return _SPACE.sub(" ", "".join(parts)).strip()


def _unseen_or_furniture(tag: Tag) -> bool:
    """Hidden content, and the page's own footer (copyright, links), which would repeat in every page of a site;
    a footer inside an <article> belongs to it (its author, its date) and is kept."""
    hidden = tag.get("hidden")
    if hidden is not None and str(hidden).strip().lower() != "until-found":
        return True
    if _HIDING_STYLE.search(str(tag.get("style") or "")):
        return True
    if str(tag.get("role") or "").strip().lower() in _FURNITURE_ROLES:
        return True
    return tag.name == "footer" and tag.find_parent("article") is None


def _drop_permalinks(heading: Tag) -> None:
    """Take out the heading's permalink, a link to itself with a sign for text (Sphinx's and MkDocs' "¶", "#"):
    left in, it ended the section's name ("Wiring ¶") and the heading's line."""
    for link in heading.find_all("a", href=True):
        if str(link["href"]).startswith("#") and not any(char.isalnum() for char in link.get_text()):
            link.decompose()


def _code_text(pre: Tag) -> str:
    """A <pre> block's text with its <br>s as line breaks: rich-text editors write a code block's lines so,
    and get_text() ran them together ("a = 1b = 2")."""
    for line_break in pre.find_all("br"):
        line_break.replace_with("\n")
    return pre.get_text()


def _fenced(code: str) -> str:
    """Code in a fence longer than any run of backticks inside it, so the fence holds it whole."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{code}\n{fence}"


def _title(soup: BeautifulSoup) -> str:
    """The page's <title> (not an SVG image's), else its first <h1>."""
    for tag in [*soup.find_all("title"), *soup.find_all("h1")]:
        if not tag.find_parent("svg") and (title := _SPACE.sub(" ", tag.get_text(" ")).strip()):
            return title
    return ""


_XML_DECLARATION = re.compile(rb"""\s*<\?xml[^>]{0,200}?encoding\s*=\s*["']([-\w.:]{1,40})""", re.IGNORECASE)
_META = re.compile(rb"<meta[\s/]", re.IGNORECASE)
_CHARSET = re.compile(rb"""charset\s*=\s*["']?\s*([-\w.:]{1,40})""", re.IGNORECASE)


def _declared_encoding(body: bytes) -> str | None:
    """The encoding the page's XML declaration, else its first <meta> naming a charset (<meta charset> or
    http-equiv's content), declares, wherever in the page that <meta> is: a browser's parser changes to it
    when it gets there, behind an inline script of any length. Each tag is read to its '>' once (linear:
    BeautifulSoup's search, within only the first 5 % of the page, took minutes for a page of '<meta 's)."""
    if declaration := _XML_DECLARATION.match(body):
        return declaration.group(1).decode("ascii")
    position = 0
    while meta := _META.search(body, position):
        end = body.find(b">", meta.end())
        if end == -1:
            return None  # no later <meta> is closed either
        if charset := _CHARSET.search(body, meta.end(), end):
            return charset.group(1).decode("ascii")
        position = end + 1
    return None


def _declared_codec(body: bytes) -> str:
    """The codec the page's <meta charset> (or XML declaration) names, read the way browsers read it."""
    try:
        codec = codecs.lookup(_declared_encoding(body) or _WEB_DEFAULT).name
    except LookupError:
        return _WEB_DEFAULT
    if codec.startswith(("utf-16", "utf-32")):
        return "utf-8"  # a byte-order mark, not a declaration, makes a page UTF-16
    return _WEB_DEFAULT if codec in _READ_AS_WEB_DEFAULT else codec


def _decoded(data: bytes) -> str:
    """UTF-8 when the bytes are UTF-8, even if a stale declaration names a legacy charset (text sent as
    JSON always is); else the byte-order mark's encoding, else the declared one, else Windows-1252. Never a
    guess from the bytes: a German paragraph was guessed to be Baltic, a French line Central European."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    body, marked = EncodingDetector.strip_byte_order_mark(data)
    return body.decode(marked or _declared_codec(body), errors="replace")


# Where a tag, comment or declaration opens; one that no '>' closes runs to the end of the page.
_MARKUP_OPEN = re.compile(r"<[a-zA-Z/!?]")


def _without_unclosed_markup(text: str) -> str:
    """The page without the markup the end of the file cut off, which HTML5 drops. Python's html.parser
    (before 3.11.13) keeps it as text, scanning the rest of the page again from each '<' in it: quadratic,
    120 KB of '<a x="' took 20 seconds."""
    opened = _MARKUP_OPEN.search(text, text.rfind(">") + 1)
    return text[: opened.start()] if opened else text


def parse_html(filename: str, data: bytes) -> ParsedDocument:
    if not data.strip():
        raise UnprocessableDocument(f"{filename}: the file is empty")
    page = _decoded(data)
    if NUL in page:  # refused as in a text file; a `&#0;` reference is read as U+FFFD, as browsers read it
        raise UnprocessableDocument(f"{filename}: binary content, not text: it holds {NUL_CHARACTERS}")
    soup = BeautifulSoup(_without_unclosed_markup(written_out(page)), "html.parser")
    out = _Writer()
    _walk(soup, out)  # the whole document: text after </body>, or in a head never closed, is still page text
    out.flush()
    text = out.joined()
    if is_blank(text):
        raise UnprocessableDocument(f"{filename}: no text found in the HTML")
    return ParsedDocument(
        text=text, format="html", title=_title(soup) or None, section_starts=sections_under(text, out.headings),
        code_blocks=tuple(out.code_blocks),
    )
