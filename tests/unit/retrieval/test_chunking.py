from __future__ import annotations

import base64
import random
import re

import pytest

from services.retrieval.chunking import MAX_CHARS_PER_TOKEN, Chunk, chunk_text, document_title

pytestmark = pytest.mark.unit


def words(text: str) -> int:
    return len(text.split())


def numbered(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}." if i % 7 == 6 else f"w{i}" for i in range(start, start + n))


GUIDE = f"""# Cairn guide

Cairn answers questions from your documents.

## Operations

### Starting

Run make up. {numbered(60)}

### Stopping

Press Ctrl-C in the shell that runs cairn up.

## Users

{numbered(30, 1000)}

{numbered(30, 2000)}
"""


def test_chunk_text_is_the_exact_span_of_the_original() -> None:
    for chunk in chunk_text(GUIDE, count_tokens=words, chunk_size=20, chunk_overlap=5):
        assert GUIDE[chunk.char_start : chunk.char_end] == chunk.text
        assert chunk.text == chunk.text.strip() and chunk.text


def test_chunks_stay_within_the_token_budget_and_cover_every_word() -> None:
    chunks = chunk_text(GUIDE, count_tokens=words, chunk_size=20, chunk_overlap=5)
    assert all(words(c.text) <= 20 for c in chunks)
    covered = " ".join(c.text for c in chunks).split()
    assert set(GUIDE.split()) <= set(covered)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))


def test_consecutive_chunks_of_a_section_overlap() -> None:
    text = numbered(200)
    chunks = chunk_text(text, count_tokens=words, chunk_size=40, chunk_overlap=8)
    assert len(chunks) >= 5
    for before, after in zip(chunks, chunks[1:]):
        assert after.char_start < before.char_end, "the next chunk should start inside the previous one"
        shared = words(text[after.char_start : before.char_end])
        assert 1 <= shared <= 8


def test_no_overlap_when_asked_for_none() -> None:
    chunks = chunk_text(numbered(100), count_tokens=words, chunk_size=30, chunk_overlap=0)
    assert all(after.char_start >= before.char_end for before, after in zip(chunks, chunks[1:]))


def test_sections_carry_the_heading_path_without_the_title() -> None:
    chunks = chunk_text(GUIDE, count_tokens=words, chunk_size=200, chunk_overlap=10)
    by_section = {c.section: c for c in chunks}
    assert set(by_section) == {"", "Operations > Starting", "Operations > Stopping", "Users"}
    assert by_section["Operations > Stopping"].text.startswith("### Stopping")
    # "## Operations" has nothing under it but sub-headings: it opens the Starting chunk, not a chunk of its own.
    assert by_section["Operations > Starting"].text.startswith("## Operations\n\n### Starting")


def test_a_heading_inside_a_code_fence_is_not_a_section() -> None:
    text = "# T\n\n## Real\n\n```sh\n# not a heading\necho hi\n```\n"
    (chunk,) = chunk_text(text, count_tokens=words, chunk_size=100, chunk_overlap=0)
    assert chunk.section == "Real"
    assert "# not a heading" in chunk.text


def test_plain_text_has_no_sections() -> None:
    text = "# looks like a heading\n\nbut this is a .txt file"
    chunks = chunk_text(text, count_tokens=words, chunk_size=100, chunk_overlap=0, markdown=False)
    assert [c.section for c in chunks] == [""]
    assert document_title(text, fallback="notes", markdown=False) == "notes"


def test_a_word_longer_than_the_budget_is_cut_by_characters() -> None:
    def chars(text: str) -> int:  # one token per 4 characters, like a sub-word tokenizer
        return sum(-(-len(w) // 4) for w in text.split())

    blob = "x" * 1000
    chunks = chunk_text(f"before {blob} after", count_tokens=chars, chunk_size=50, chunk_overlap=0)
    assert all(chars(c.text) <= 50 for c in chunks)
    assert "".join(c.text for c in chunks if c.text.startswith("x")).count("x") >= 1000 - 8


_SUBWORD = re.compile(r"[A-Za-z]{1,4}|\S")


def subwords(text: str) -> int:  # uneven like a sub-word tokenizer: up to 4 letters, or any other character, per token
    return len(_SUBWORD.findall(text))


class CountingSubwords:
    def __init__(self) -> None:
        self.calls = 0
        self.characters = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        self.characters += len(text)
        return subwords(text)


BLOB = base64.b64encode(random.Random(0).randbytes(37_500)).decode()  # 50,000 characters, no whitespace


@pytest.mark.parametrize("overlap", [0, 8])
def test_a_long_span_without_whitespace_is_cut_into_full_pieces_that_fit_and_rebuild_it(overlap: int) -> None:
    chunks = chunk_text(BLOB, count_tokens=subwords, chunk_size=50, chunk_overlap=overlap, markdown=False)
    assert all(subwords(c.text) <= 50 for c in chunks)
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(BLOB)
    # Pieces of a cut word are near the budget, so no overlap fits: the chunks meet end to end.
    assert all(before.char_end == after.char_start for before, after in zip(chunks, chunks[1:]))
    assert "".join(c.text for c in chunks) == BLOB
    assert len(chunks) <= 1.2 * subwords(BLOB) / 50


def test_cutting_a_long_span_counts_each_piece_a_few_times_not_the_rest_of_the_span() -> None:
    counter = CountingSubwords()
    chunks = chunk_text(BLOB, count_tokens=counter, chunk_size=50, chunk_overlap=0, markdown=False)
    assert len(chunks) > 400
    assert counter.calls <= 3 * len(chunks) + 10
    assert counter.characters <= 10 * len(BLOB), "counting work should grow linearly with the span"


def test_paragraphs_are_kept_whole_when_they_fit() -> None:
    paragraphs = [numbered(12, i * 100) for i in range(6)]
    chunks = chunk_text("\n\n".join(paragraphs), count_tokens=words, chunk_size=30, chunk_overlap=0)
    assert len(chunks) == 3
    for chunk in chunks:
        assert all(part in paragraphs for part in chunk.text.split("\n\n"))


def test_windows_line_endings_separate_paragraphs_too() -> None:
    paragraphs = ["\n".join(numbered(4, i * 100 + line * 10) for line in range(3)) for i in range(5)]
    unix = chunk_text("\n\n".join(paragraphs), count_tokens=words, chunk_size=20, chunk_overlap=0)
    crlf = "\n\n".join(paragraphs).replace("\n", "\r\n")
    windows = chunk_text(crlf, count_tokens=words, chunk_size=20, chunk_overlap=0)
    assert [c.text for c in unix] == paragraphs
    assert [c.text.replace("\r\n", "\n") for c in windows] == paragraphs, "a chunk ends where a paragraph ends"


def wordpieces(text: str) -> int:  # like BERT's tokenizer: a word over 100 characters is one unknown token
    return sum(1 if len(word) > 100 else -(-len(word) // 4) for word in text.split())


def test_a_word_the_tokenizer_counts_as_one_token_is_still_cut_to_the_chunk_size() -> None:
    sequence = "ACGT" * 50_000
    chunks = chunk_text(f"The sequence follows.\n\n{sequence}\n", count_tokens=wordpieces, chunk_size=50, chunk_overlap=0)
    assert chunks[0].text == "The sequence follows."
    assert max(len(c.text) for c in chunks) <= 50 * MAX_CHARS_PER_TOKEN
    assert "".join(c.text for c in chunks[1:]) == sequence


def test_title_is_the_first_level_one_heading_else_the_fallback() -> None:
    assert document_title(GUIDE, fallback="x") == "Cairn guide"
    assert document_title("## Only a subheading\ntext", fallback="guide") == "guide"


def test_blank_text_has_no_chunks() -> None:
    assert chunk_text(" \n\n\t", count_tokens=words, chunk_size=10, chunk_overlap=0) == []


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_impossible_sizes_are_refused(size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", count_tokens=words, chunk_size=size, chunk_overlap=overlap)


def test_chunk_records_are_plain_data() -> None:
    (chunk,) = chunk_text("hello world", count_tokens=words, chunk_size=10, chunk_overlap=0)
    assert chunk == Chunk("hello world", 0, "", 0, 11)


def paged(pages: list[str]) -> tuple[str, tuple[int, ...]]:
    starts, offset = [], 0
    for page in pages:
        starts.append(offset)
        offset += len(page) + 2
    return "\n\n".join(pages), tuple(starts)


def test_chunks_carry_their_page_and_never_cross_a_page_boundary() -> None:
    text, starts = paged([numbered(25), numbered(25, 100), "", numbered(10, 200)])
    chunks = chunk_text(text, count_tokens=words, chunk_size=20, chunk_overlap=5, markdown=False, page_starts=starts)
    assert [c.page for c in chunks] == [1, 1, 2, 2, 4], "page 3 is blank, and its number is kept for page 4"
    bounds = [*starts, len(text) + 2]
    for chunk in chunks:
        assert bounds[chunk.page - 1] <= chunk.char_start < chunk.char_end <= bounds[chunk.page]
        assert text[chunk.char_start : chunk.char_end] == chunk.text
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))


def test_a_section_continues_across_pages_and_small_pages_are_not_merged() -> None:
    text, starts = paged(["# Manual\n\n## Setup\n\nPlug it in.", "Then switch it on.", "## Care\n\nDust it."])
    chunks = chunk_text(text, count_tokens=words, chunk_size=100, chunk_overlap=10, page_starts=starts)
    assert [(c.page, c.section) for c in chunks] == [(1, "Setup"), (2, "Setup"), (3, "Care")]
    assert chunks[1].text == "Then switch it on."


def test_text_without_pages_has_no_page_numbers() -> None:
    assert {c.page for c in chunk_text(GUIDE, count_tokens=words, chunk_size=20, chunk_overlap=5)} == {None}


def test_page_starts_must_be_ascending() -> None:
    with pytest.raises(ValueError):
        chunk_text("a b c", count_tokens=words, chunk_size=10, chunk_overlap=0, page_starts=(0, 4, 2))


def test_given_section_starts_replace_markdown_headings() -> None:
    text, starts = paged(["Preface.\n\nSetup\nUnpack it.", "More setup.\n\nWiring\nBrown is live."])
    sections = ((text.index("Setup"), "Setup"), (text.index("Wiring"), "Setup > Wiring"))
    chunks = chunk_text(text, count_tokens=words, chunk_size=100, chunk_overlap=0, page_starts=starts, section_starts=sections)
    assert [(c.page, c.section, c.text) for c in chunks] == [
        (1, "", "Preface."),
        (1, "Setup", "Setup\nUnpack it."),
        (2, "Setup", "More setup."),
        (2, "Setup > Wiring", "Wiring\nBrown is live."),
    ]


def test_code_blocks_a_parser_reports_are_kept_whole_when_they_fit() -> None:
    code = "```\nmake\n\nmake up\n```"
    text = f"## Run\n\none two three\n\n{code}\n\nafter"
    start = text.index(code)
    chunks = chunk_text(
        text, count_tokens=words, chunk_size=6, chunk_overlap=0, markdown=False,
        section_starts=((0, "Run"),), code_blocks=((start, start + len(code)),),
    )
    assert [c.text for c in chunks] == ["## Run\n\none two three", f"{code}\n\nafter"]


@pytest.mark.parametrize("blocks", [((5, 5),), ((4, 2),), ((0, 4), (3, 6))])
def test_code_blocks_must_be_ascending_and_apart(blocks: tuple[tuple[int, int], ...]) -> None:
    with pytest.raises(ValueError, match="code_blocks"):
        chunk_text("some text here", count_tokens=words, chunk_size=5, chunk_overlap=0, code_blocks=blocks)


@pytest.mark.parametrize("text", [". " * 100_000, "The pump runs.\n" * 20_000, "." * 200_000, BLOB * 4])
def test_a_text_far_longer_than_a_chunk_is_never_given_to_the_tokenizer_whole(text: str) -> None:
    # The tokenizer's record of its input takes hundreds of bytes per token: one count of a whole 20 MB
    # upload (of dots: 20 million tokens) took 10 GB.
    counted: list[int] = []

    def counting(piece: str) -> int:
        counted.append(len(piece))
        return subwords(piece)

    chunks = chunk_text(text, count_tokens=counting, chunk_size=50, chunk_overlap=8, markdown=False)
    assert max(counted) <= 50 * MAX_CHARS_PER_TOKEN
    assert all(subwords(c.text) <= 50 for c in chunks)
    assert chunks[-1].char_end == len(text.rstrip())
