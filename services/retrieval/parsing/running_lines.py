"""A PDF's running header and footer: the same line at the top or bottom of most pages ("ACME pump manual",
"Confidential", "Page 3 of 40"). Left in, it would open or close a chunk on every page, so that a search for
its words found every page alike."""
from __future__ import annotations

import re
from collections import Counter

# Numbers aside, so that "Page 3 of 40" on one page is the same line as "Page 4 of 40" on the next.
_NUMBERS = re.compile(r"\d+")
MIN_PAGES = 3  # in a shorter PDF, a line on every page is as likely to be content
MAX_LINES = 2  # a line further in is more likely content than a longer header


def _shape(line: str) -> str:
    return _NUMBERS.sub("#", " ".join(line.split()))


def _edge_line(page: str, edge: int) -> str:
    return page.split("\n", 1)[0] if edge == 0 else page.rsplit("\n", 1)[-1]


def _without_edge_line(page: str, edge: int) -> str:
    rest = page.split("\n", 1)[1:] if edge == 0 else page.rsplit("\n", 1)[:-1]
    return rest[0].strip() if rest else ""


def _said_before(pages: list[str], index: int, edge: int, line: str) -> bool:
    """Whether `line` is already a line of the text before the edge line `edge` of page `index`."""
    before = [*pages[:index], _without_edge_line(pages[index], -1) if edge == -1 else ""]
    return any(line == " ".join(earlier.split()) for page in before for earlier in page.split("\n"))


def _drop_repeated_edge(pages: list[str], edge: int) -> bool:
    """Drop the line at `edge` (0 first, -1 last) of each page where it is a line found at that edge of at least
    half of the pages with text, and of at least MIN_PAGES; whether any was dropped. A page's only line is
    kept: it is the page's content (or a page number alone on a page of pictures, which does no harm).

    A line that reads the same on every page keeps its first appearance, so that its words are still found
    once: a table's header row printed again on each page it runs over is its header where it starts. A line
    whose numbers change from page to page ("Page 3 of 40") is a page counter, dropped everywhere."""
    lines = [" ".join(_edge_line(page, edge).split()) if "\n" in page else "" for page in pages]
    shapes = [_shape(line) for line in lines]
    counts = Counter(shape for shape in shapes if shape)
    with_text = sum(1 for page in pages if page)
    repeated = {shape for shape, times in counts.items() if times >= max(MIN_PAGES, with_text / 2)}
    kept: set[int] = set()
    for shape in repeated:
        at = [index for index, found in enumerate(shapes) if found == shape]
        if len({lines[index] for index in at}) == 1 and not _said_before(pages, at[0], edge, lines[at[0]]):
            kept.add(at[0])
    for index, shape in enumerate(shapes):
        if shape in repeated and index not in kept:
            pages[index] = _without_edge_line(pages[index], edge)
    return bool(repeated)


def without_running_lines(pages: list[str]) -> list[str]:
    """The pages' texts (each stripped) without a running header and footer of up to MAX_LINES lines each."""
    kept = list(pages)
    if len(kept) >= MIN_PAGES:
        for edge in (0, -1):
            for _ in range(MAX_LINES):
                if not _drop_repeated_edge(kept, edge):
                    break
    return kept
