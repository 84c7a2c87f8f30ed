import pytest

from services.chat.citations import SNIPPET_CHARS, resolve_citations, snippet_of
from tests.unit.chat.fakes import make_chunk

pytestmark = pytest.mark.unit

CHUNKS = [make_chunk(n, f"Passage number {n}.") for n in range(1, 5)]


def test_renumbers_in_order_of_first_use_and_keeps_only_cited_chunks():
    result = resolve_citations("First [3]. Second [1]. Again [3].", CHUNKS)
    assert result.answer == "First [1]. Second [2]. Again [1]."
    assert [(c.number, c.chunk.chunk_id) for c in result.citations] == [(1, "chunk-3"), (2, "chunk-1")]


def test_multi_number_markers_are_renumbered_and_deduplicated():
    result = resolve_citations("Both [4, 2]. Then [2,4, 4]. And [1].", CHUNKS)
    assert result.answer == "Both [1, 2]. Then [2, 1]. And [3]."
    assert [c.chunk.chunk_id for c in result.citations] == ["chunk-4", "chunk-2", "chunk-1"]


def test_numbers_pointing_at_no_chunk_are_dropped():
    result = resolve_citations("Real [2]. Invented [9]. Mixed [0, 2, 7].", CHUNKS)
    assert result.answer == "Real [1]. Invented. Mixed [1]."
    assert [c.chunk.chunk_id for c in result.citations] == ["chunk-2"]


def test_answer_without_markers_has_no_citations():
    result = resolve_citations("No markers here, only [brackets] and [a1].", CHUNKS)
    assert result.citations == []
    assert result.answer == "No markers here, only [brackets] and [a1]."


def test_citation_carries_chunk_fields_and_snippet():
    chunk = make_chunk(1, "Short text.", page=3)
    (citation,) = resolve_citations("Yes [1].", [chunk]).citations
    assert citation.chunk is chunk
    assert citation.snippet == "Short text."


def test_snippet_cuts_at_a_sentence_end_within_the_limit():
    first = "A" * 150 + " ends here."
    text = f"{first} Then a second sentence that goes on and on " + "word " * 40
    snippet = snippet_of(text)
    assert snippet == first
    assert len(snippet) <= SNIPPET_CHARS


def test_snippet_without_sentence_end_cuts_at_a_word_boundary():
    text = "lorem ipsum " * 60
    snippet = snippet_of(text)
    assert len(snippet) <= SNIPPET_CHARS
    assert snippet.endswith("…")
    assert snippet[:-1].split()[-1] in ("lorem", "ipsum")


def test_snippet_leaves_out_markdown_headings():
    assert snippet_of("## Adding users\nRun the command.") == "Run the command."
