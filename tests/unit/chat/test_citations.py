import re
import time
from pathlib import Path

import pytest

from services.chat import prompt
from services.chat.citations import (
    SNIPPET_CHARS,
    dice,
    lacks_information,
    resolve_citations,
    snippet_of,
)
from shared.reasoning import without_reasoning
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


def test_snippet_does_not_end_at_an_abbreviation():
    text = "A" * 120 + ". Then set a flag, e.g. the verbose one, and run it again with more output than fits."
    assert not snippet_of(text).endswith("e.g.")


def test_snippet_without_sentence_end_cuts_at_a_word_boundary():
    text = "lorem ipsum " * 60
    snippet = snippet_of(text)
    assert len(snippet) <= SNIPPET_CHARS
    assert snippet.endswith("…")
    assert snippet[:-1].split()[-1] in ("lorem", "ipsum")


def test_snippet_leaves_out_markdown_headings():
    assert snippet_of("## Adding users\nRun the command.") == "Run the command."


def test_ranges_expand_and_are_renumbered():
    result = resolve_citations("Steps [2-4]. Start [1].", CHUNKS)
    assert result.answer == "Steps [1, 2, 3]. Start [4]."
    assert [c.chunk.chunk_id for c in result.citations] == ["chunk-2", "chunk-3", "chunk-4", "chunk-1"]


def test_range_partly_out_of_range_keeps_the_real_passages():
    result = resolve_citations("See [3-6].", CHUNKS)
    assert result.answer == "See [1, 2]."
    assert [c.chunk.chunk_id for c in result.citations] == ["chunk-3", "chunk-4"]


def test_citation_word_form_is_rewritten_to_plain_number():
    result = resolve_citations("Per [Citation 3] and [citation 1].", CHUNKS)
    assert result.answer == "Per [1] and [2]."
    assert [c.chunk.chunk_id for c in result.citations] == ["chunk-3", "chunk-1"]


@pytest.mark.parametrize(("answer", "rewritten", "cited"), [
    ("Steps [2–4]. Start [1].", "Steps [1, 2, 3]. Start [4].", ["chunk-2", "chunk-3", "chunk-4", "chunk-1"]),  # en dash
    ("Steps [2—3].", "Steps [1, 2].", ["chunk-2", "chunk-3"]),  # em dash
    ("Per 【3】 and 【1, 2】.", "Per [1] and [2, 3].", ["chunk-3", "chunk-1", "chunk-2"]),  # full-width brackets
    ("Per [Source 3] and [source: 1].", "Per [1] and [2].", ["chunk-3", "chunk-1"]),
    ("Per [Doc 2], [Document 4] and [Passage 1, Passage 3].", "Per [1], [2] and [3, 4].",
     ["chunk-2", "chunk-4", "chunk-1", "chunk-3"]),
    ("Per ［３］ and ［１，２］.", "Per [1] and [2, 3].", ["chunk-3", "chunk-1", "chunk-2"]),  # full-width square, digits
    ("Per [Sources 3, 1] and [Citations: 2].", "Per [1, 2] and [3].", ["chunk-3", "chunk-1", "chunk-2"]),
    ("Per [^3] and [^1][^2].", "Per [1] and [2][3].", ["chunk-3", "chunk-1", "chunk-2"]),  # Markdown footnotes
    # Lists with a semicolon or an "and": left as written, their numbers would name other passages once the
    # other markers are renumbered.
    ("Per [3]. Both [1; 2] and [4；1].", "Per [1]. Both [2, 3] and [4, 2].", ["chunk-3", "chunk-1", "chunk-2", "chunk-4"]),
    ("Per [3]. Both [1 and 2], [Sources 1, 2, and 4] and [2 & 4].", "Per [1]. Both [2, 3], [2, 3, 4] and [3, 4].",
     ["chunk-3", "chunk-1", "chunk-2", "chunk-4"]),
])
def test_the_other_ways_models_write_markers_are_rewritten_to_plain_numbers(answer, rewritten, cited):
    result = resolve_citations(answer, CHUNKS)
    assert result.answer == rewritten
    assert [p.chunk_id for c in result.citations for p in c.cited_passages] == cited


def test_value_ranges_with_a_typographic_dash_stay_as_written():
    assert resolve_citations("Scores lie in [0–1] [2].", CHUNKS).answer == "Scores lie in [0–1] [1]."
    assert resolve_citations("Use 【note】 here [1].", CHUNKS).answer == "Use 【note】 here [1]."


def test_heading_reference_matches_exact_title_and_section():
    chunks = [make_chunk(1, "a.", title="Users", section="Adding"), make_chunk(2, "b.", title="Users", section="Removing")]
    result = resolve_citations("Remove them [Users > Removing].", chunks)
    assert result.answer == "Remove them [1]."
    assert [c.chunk.chunk_id for c in result.citations] == ["chunk-2"]


def test_heading_reference_matches_by_containment():
    chunks = [make_chunk(1, "a.", title="Admin Guide: Users", section="Adding new users")]
    result = resolve_citations("Add them [Users > Adding new].", chunks)
    assert result.answer == "Add them [1]."


def test_heading_reference_matches_by_dice_similarity_and_ignores_unknown_headings():
    chunks = [make_chunk(1, "a.", title="Installation", section="Requirements")]
    assert resolve_citations("Needs [Instalation > Requirement] x.", chunks).answer == "Needs [1] x."
    unrelated = resolve_citations("Odd [Billing > Refunds].", chunks)
    assert unrelated.answer == "Odd [Billing > Refunds]."
    assert unrelated.citations == []


def test_dice_similarity():
    assert dice("night", "nacht") == pytest.approx(0.25)
    assert dice("same", "same") == 1.0
    assert dice("a", "b") == 0.0


def test_two_chunks_of_one_document_page_become_one_citation():
    chunks = [
        make_chunk(1, "First part.", doc_id="manual", page=4),
        make_chunk(2, "Second part.", doc_id="manual", page=4),
        make_chunk(3, "Other page.", doc_id="manual", page=5),
    ]
    result = resolve_citations("A [2]. B [1]. C [3]. D [1, 2].", chunks)
    assert result.answer == "A [1]. B [1]. C [2]. D [1]."
    assert [(c.number, c.chunk.chunk_id, c.chunk.page) for c in result.citations] == [(1, "chunk-2", 4), (2, "chunk-3", 5)]

    from services.chat.presentation import citation_out

    # The answer names every passage a number covers, in the order the model cited them, so a client of the
    # model's own numbering (the /v1 stream) can list each.
    assert [citation_out(c).chunk_ids for c in result.citations] == [["chunk-2", "chunk-1"], ["chunk-3"]]


def test_chunks_without_page_stay_separate_citations():
    chunks = [make_chunk(1, "x.", doc_id="guide"), make_chunk(2, "y.", doc_id="guide")]
    assert len(resolve_citations("[1] [2]", chunks).citations) == 2


def test_markdown_links_are_not_citations():
    result = resolve_citations("See [3](https://example.com) and [2].", CHUNKS)
    assert result.answer == "See [3](https://example.com) and [1]."


@pytest.mark.parametrize("answer", [
    "I don't have enough information to answer that [1].",
    "There is not enough information in the documents [2, 3].",
    "I cannot find this information in [Citation 1].",
    "I don’t have enough information [1-2].",
    # The wording the system prompt asks for, and its variants.
    "The documents do not contain enough information to answer that [1].",
    "The documents don't contain enough information to answer.",
    "The provided documents do not contain information on pricing [2].",
    "The context does not contain enough information. [1]",
])
def test_insufficient_information_answer_loses_markers_and_citations(answer):
    assert lacks_information(answer)
    result = resolve_citations(answer, CHUNKS)
    assert result.citations == []
    assert "[" not in result.answer


def test_the_refusal_the_system_prompt_asks_for_is_recognised():
    instruction = (Path(prompt.__file__).parent / "prompts" / "system.txt").read_text()
    asked_for = re.search(r"say that (the documents [^.]+)\.", instruction).group(1)
    assert lacks_information(asked_for[0].upper() + asked_for[1:] + ".")


@pytest.mark.parametrize("answer", [
    "Sessions expire after a day [1]. The provided documents contain no information about renewal [2].",
    "Login sessions are stored in Redis [1]. The provided context does not contain information about clustering.",
    "I don't have enough information about pricing, but login sessions are stored in Redis [1].",
])
def test_an_answer_citing_passages_for_a_part_is_kept_though_it_says_the_rest_is_missing(answer):
    result = resolve_citations(answer, CHUNKS)
    assert [c.number for c in result.citations][:1] == [1] and result.answer.startswith(answer[:20])


def test_ordinary_answer_is_not_insufficient():
    assert not lacks_information("Run the command [1].")
    assert not lacks_information("If you cannot find the file, run cairn ingest again [1].")
    # The phrases as facts from a passage, not about the documents: the answer stands with its citations.
    stated = "Events carry no information about the password; only its hash is stored [1]."
    assert not lacks_information(stated)
    assert not lacks_information("A token does not contain information about roles. Roles live in Redis [2].")
    assert [c.number for c in resolve_citations(stated, CHUNKS).citations] == [1]


def test_snippet_limit_is_200_characters():
    assert SNIPPET_CHARS == 200
    assert len(snippet_of("word " * 100)) <= 200


def test_sources_are_deduplicated_by_url_then_doc_id():
    from dataclasses import replace

    from services.chat.presentation import citation_out, sources_out

    chunks = [
        make_chunk(1, "p1.", doc_id="manual", page=1),
        replace(make_chunk(2, "p2.", doc_id="manual", page=2), url="docs/doc-1.md"),
        replace(make_chunk(3, "x.", doc_id="faq"), url=None),
        replace(make_chunk(4, "y.", doc_id="faq"), url=None),
    ]
    cited = resolve_citations("[1] [2] [3] [4]", chunks)
    assert len(cited.citations) == 4
    citations = [citation_out(c) for c in cited.citations]
    sources = sources_out(citations, {c.chunk_id: c for c in chunks})
    assert [(s.doc_id, s.chunk_id) for s in sources] == [("manual", "chunk-1"), ("faq", "chunk-3")]


def test_every_citation_carries_its_whole_passage_not_only_the_sources_entry_of_its_document():
    from dataclasses import replace

    from services.chat.presentation import citation_out, sources_out

    long_passage = "Adding a user. " + "Run cairn user add with a name and the roles it gets. " * 8
    chunks = [
        replace(make_chunk(1, "Users and roles. An administrator manages users.", doc_id="manual", page=1), url=None),
        replace(make_chunk(2, long_passage, doc_id="manual", page=2), url=None),
    ]
    citations = [citation_out(c) for c in resolve_citations("Admins do it [1]. Run it [2].", chunks).citations]
    assert [c.content for c in citations] == [chunks[0].content, long_passage]
    assert len(citations[1].snippet) <= SNIPPET_CHARS < len(citations[1].content)
    sources = sources_out(citations, {c.chunk_id: c for c in chunks})
    assert [s.chunk_id for s in sources] == ["chunk-1"]  # one per document: [2]'s passage is only in its citation
    assert sources[0].content == chunks[0].content


@pytest.mark.parametrize(("answer", "expected", "numbers"), [
    # Brackets inside code are the code's own, never citations.
    ("Read the first session with `sessions[1]` and pass it on.", "Read the first session with `sessions[1]` and pass it on.", []),
    ("```python\nx = items[2]\n```\nThat prints it [3].", "```python\nx = items[2]\n```\nThat prints it [1].", [1]),
    # A span opened by two backticks holds until two close it.
    ("Read it with ``items[2]`` at once [3].", "Read it with ``items[2]`` at once [1].", [1]),
    # An index glued to a word that names no passage stays; a citation glued to a word still counts.
    ("Use sessions[0] for the first one [2].", "Use sessions[0] for the first one [1].", [1]),
    ("They live in Redis[2].", "They live in Redis[1].", [1]),
    # A year is not a passage number.
    ("It was released in [2019] [4].", "It was released in [2019] [1].", [1]),
    # Backticks that open no code, as Markdown reads them: a run of three inside a line that none closes, and
    # the inner fence of a block opened by four, are text; markers after the first and inside the second
    # were renumbered, or taken for citations, as if the other way round.
    ("Stored in Redis [2]. Wrap it in ``` fences [1].", "Stored in Redis [1]. Wrap it in ``` fences [2].", [1, 2]),
    ("````\n```\nx [1]\n```\n````\nStored in Redis [2].", "````\n```\nx [1]\n```\n````\nStored in Redis [1].", [1]),
    ("Start it with ```cairn up``` [2].", "Start it with ```cairn up``` [1].", [1]),
])
def test_brackets_that_are_code_indexes_or_years_are_left_as_written(answer, expected, numbers):
    result = resolve_citations(answer, CHUNKS)
    assert result.answer == expected
    assert [c.number for c in result.citations] == numbers


@pytest.mark.parametrize(("answer", "expected", "numbers"), [
    # Passages count from 1: a pair or range starting at 0 is a range of values.
    ("A score lies in [0, 1] [2].", "A score lies in [0, 1] [1].", [1]),
    ("Set a weight in [0-1].", "Set a weight in [0-1].", []),
    ("Ports in [0, 65535] are accepted [3].", "Ports in [0, 65535] are accepted [1].", [1]),
    ("A weight in [0; 1] is fine [3].", "A weight in [0; 1] is fine [1].", [1]),
])
def test_a_range_of_values_starting_at_zero_is_not_a_citation(answer, expected, numbers):
    result = resolve_citations(answer, CHUNKS)
    assert (result.answer, [c.number for c in result.citations]) == (expected, numbers)


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>\nPassage [2] says so.\n</think>\n\nRun it [1].", "Run it [1]."),
    ("<think>\n\n</think>\n\nRun it [1].", "Run it [1]."),  # thinking turned off, the empty block still sent
    ("<THINKING>Maybe [3].</THINKING>Run it [1].", "Run it [1]."),
    ("The template opened the block. [2]\n</think>\n\nRun it [1].", "Run it [1]."),
    ("<think>\nCut off by max_tokens [1]", ""),
    # Not reasoning: a tag the answer mentions, and a closing tag inside a line.
    ("Models write <think> tags [1].", "Models write <think> tags [1]."),
    ("Close it with </think> and go on [1].", "Close it with </think> and go on [1]."),
])
def test_the_reasoning_before_an_answer_is_taken_out(text, expected):
    assert without_reasoning(text) == expected


def test_an_answer_with_a_long_run_of_blanks_is_read_in_linear_time():
    """Dropping markers once rescanned a run of blanks from each of its characters: 32,000 tabs in a model's
    answer took 2 seconds, these about 15. A guard, not a speed target."""
    blanks = "\t" * 90_000
    started = time.perf_counter()
    result = resolve_citations(f"Sessions live in Redis{blanks}and expire [1]  [9].", CHUNKS)
    assert result.answer == f"Sessions live in Redis{blanks}and expire [1]."  # [9] names no passage
    assert time.perf_counter() - started < 5


def test_an_answer_opening_with_a_long_run_of_blank_lines_is_read_in_linear_time():
    """The pattern once took the leading blanks itself and backtracked over them quadratically: 16,000 newlines
    (a model stuck on blank lines) took 3 seconds, 40,000 about 20. A guard, not a speed target."""
    started = time.perf_counter()
    assert without_reasoning("\n" * 40_000 + "Run it [1].") == "Run it [1]."
    assert without_reasoning(" \n" * 20_000 + "</think>\nRun it [1].") == "Run it [1]."
    assert time.perf_counter() - started < 5
