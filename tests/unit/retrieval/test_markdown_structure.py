"""How the chunker reads markdown structure: code fences, setext headings and YAML front matter."""
from __future__ import annotations

import time

import pytest

from services.retrieval.chunking import chunk_text, document_title

pytestmark = pytest.mark.unit


def words(text: str) -> int:
    return len(text.split())


def sections(text: str) -> list[tuple[str, str]]:
    chunks = chunk_text(text, count_tokens=words, chunk_size=200, chunk_overlap=0)
    for chunk in chunks:
        assert text[chunk.char_start : chunk.char_end] == chunk.text
    return [(c.section, c.text) for c in chunks]


@pytest.mark.parametrize(
    "code",
    [
        "````md\n```\n# inside code\n```\n````",
        "~~~\n```\n# inside code\n~~~",
        "```\n# inside code\n``` not a closing fence\n# still code\n```",
        "````\n# inside code\n```\n# still code\n````",
        "```\n# inside code\n~~~\n# still code\n```",
    ],
)
def test_a_code_block_ends_only_at_a_matching_fence(code: str) -> None:
    text = f"# T\n\n## Setup\n\n{code}\n\nAfter the code.\n"
    assert sections(text) == [("Setup", text.strip())]


def test_an_unclosed_code_block_runs_to_the_end() -> None:
    text = "## Setup\n\n```\n# inside code\n"
    assert [section for section, _ in sections(text)] == ["Setup"]


def test_underlined_headings_start_sections_like_hash_headings() -> None:
    text = "Pump guide\n==========\n\nIntro.\n\nInstallation\n------------\n\nMount it.\n\nWiring\n---\n\nBrown is live.\n"
    assert document_title(text, fallback="x") == "Pump guide"
    assert sections(text) == [
        ("", "Pump guide\n==========\n\nIntro."),
        ("Installation", "Installation\n------------\n\nMount it."),
        ("Wiring", "Wiring\n---\n\nBrown is live."),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Intro.\n\n---\n\nMore text.\n",  # a rule after a blank line
        "---\n\nIntro.\n",  # a rule at the start, not front matter
        "- an item\n---\n",  # under a list item, a rule
        "> quoted\n---\n",  # under a quote, a rule
        "    indented code\n---\n",
        "Intro.\n***\n===\n",  # '***' ends the paragraph, so the '===' has none above it
        "```\nIn code\n---\n```\n",
    ],
)
def test_a_line_of_dashes_without_a_paragraph_above_is_no_heading(text: str) -> None:
    assert [section for section, _ in sections(text)] == [""]
    assert document_title(text, fallback="none") == "none"


def test_front_matter_is_left_out_and_gives_the_title() -> None:
    front_matter = '---\ntitle: "Pump notes"\n# a YAML comment, not a heading\ntags: [pumps]\n---\n'
    text = front_matter + "# Guide\n\nIntro.\n\n## Care\n\nDust it.\n"
    assert document_title(text, fallback="x") == "Pump notes"
    assert sections(text) == [("", "# Guide\n\nIntro."), ("Care", "## Care\n\nDust it.")]


@pytest.mark.parametrize("line_end", ["\n", "\r\n"], ids=["unix", "windows"])
def test_toml_front_matter_is_left_out_and_gives_the_title(line_end: str) -> None:
    """Hugo and Zola sites put TOML between '+++' lines: it was indexed as text and the title missed."""
    front_matter = '+++\ntitle = "Pump notes"\ndate = 2024-05-01\n[params]\ntags = ["pumps"]\n+++\n'
    text = (front_matter + "Intro.\n\n## Care\n\nDust it.\n").replace("\n", line_end)
    assert document_title(text, fallback="x") == "Pump notes"
    assert [(section, body.replace("\r", "")) for section, body in sections(text)] == [
        ("", "Intro."), ("Care", "## Care\n\nDust it.")
    ]


@pytest.mark.parametrize(
    "text",
    ["+++\nnot = valid = toml\n+++\n# Title\n\nText.\n", "+++\ntitle = \"Never closed\"\n# Title\n\nText.\n"],
    ids=["invalid TOML", "unclosed"],
)
def test_a_plus_line_that_opens_no_toml_front_matter_is_text(text: str) -> None:
    assert document_title(text, fallback="x") == "Title"
    assert sections(text)[0][1].startswith("+++")


def test_front_matter_without_a_title_leaves_the_title_to_the_first_heading() -> None:
    text = "---\ndate: 2024-05-01\n...\nTeam notes\n==========\n\nWe met.\n"
    assert document_title(text, fallback="x") == "Team notes"
    assert [body for _, body in sections(text)] == ["Team notes\n==========\n\nWe met."]


def test_front_matter_is_only_read_in_markdown() -> None:
    text = "---\ntitle: Not here\n---\nplain words\n"
    chunks = chunk_text(text, count_tokens=words, chunk_size=200, chunk_overlap=0, markdown=False)
    assert [c.text for c in chunks] == [text.strip()]
    assert document_title(text, fallback="notes", markdown=False) == "notes"


def test_a_heading_or_title_with_a_long_run_of_blanks_is_read_in_linear_time():
    """The heading and front-matter title patterns once backtracked quadratically on blanks: 80,000 spaces
    took about a minute. A guard against catastrophic backtracking, not a speed target."""
    blanks = " " * 80_000
    started = time.perf_counter()
    assert document_title(f"# a{blanks}b\n\ntext", fallback="x") == f"a{blanks}b"
    assert document_title(f"---\ntitle: a{blanks}b\n---\n\ntext", fallback="x") == f"a{blanks}b"
    assert time.perf_counter() - started < 5


def test_front_matter_with_windows_line_ends_is_read_in_linear_time():
    """With CRLF line ends, each line of an unclosed front matter could be matched two ways ('.' takes the
    '\\r' or '\\r?' does): 24 lines took 40 s to ingest, each further line doubling it. A guard against
    catastrophic backtracking, not a speed target."""
    unclosed = "---\r\nNote: draft\r\n" + "a line of text\r\n" * 2_000
    closed = '---\r\ntitle: "Pump notes"\r\ntags: [pumps]\r\n---\r\n\r\nIntro.\r\n'
    started = time.perf_counter()
    assert document_title(unclosed, fallback="x") == "x"
    assert document_title(closed, fallback="x") == "Pump notes"
    assert [body for _, body in sections(closed)] == ["Intro."]
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(("line", "title"), [
    ("# Title #", "Title"), ("# Title ###   ", "Title"), ("# C#", "C#"), ("# Using C #", "Using C"), ("#  Spaced  ", "Spaced"),
    ("#   ", "x"),  # no title: not a heading
])
def test_closing_hashes_and_blanks_are_cut_from_a_heading(line, title):
    assert document_title(f"{line}\n\ntext", fallback="x") == title


CODE = "```bash\n# install the tool\npip install tool\n\n# then configure it\ntool init\n```"


def test_a_code_block_that_fits_a_chunk_is_not_cut_at_its_blank_lines() -> None:
    intro = " ".join(f"w{i}" for i in range(8))
    text = f"# T\n\n## Setup\n\n{intro}\n\n{CODE}\n\nAfter the code.\n"
    chunks = chunk_text(text, count_tokens=words, chunk_size=20, chunk_overlap=0)
    assert [c.text for c in chunks] == [f"# T\n\n## Setup\n\n{intro}", f"{CODE}\n\nAfter the code."]
    assert {c.section for c in chunks} == {"Setup"}


def test_a_code_block_longer_than_a_chunk_is_cut_at_its_blank_lines_first() -> None:
    text = f"## Setup\n\n{CODE}\n"
    chunks = chunk_text(text, count_tokens=words, chunk_size=10, chunk_overlap=0)
    assert [c.text for c in chunks] == [
        "## Setup\n\n```bash\n# install the tool\npip install tool",
        "# then configure it\ntool init\n```",
    ]


@pytest.mark.parametrize(
    "comment",
    [
        "<!--\n# Old section\n-->",
        "<!-- hidden draft:\n# Old section\nstill hidden -->",
        "  <!--\nOld section\n===\n-->",
    ],
)
def test_a_heading_inside_an_html_comment_starts_no_section(comment: str) -> None:
    text = f"# T\n\n## Setup\n\nRun it.\n\n{comment}\n\nMore setup.\n\n## Use\n\nUse it.\n"
    assert [section for section, _ in sections(text)] == ["Setup", "Use"]
    assert document_title(f"{comment}\n\n# Real title\n", fallback="none") == "Real title"


@pytest.mark.parametrize("indent", [" ", "  ", "   "])
def test_a_hash_heading_indented_by_up_to_three_spaces_starts_a_section(indent: str) -> None:
    text = f"{indent}# Pump guide\n\nIntro.\n\n{indent}## Setup\n\nMount it.\n"
    assert document_title(text, fallback="none") == "Pump guide"
    assert [section for section, _ in sections(text)] == ["", "Setup"]


def test_a_hash_line_indented_by_four_spaces_is_code_not_a_heading() -> None:
    text = "# T\n\n## Setup\n\nMount it.\n\n    ## not a heading\n\nWire it.\n"
    assert [section for section, _ in sections(text)] == ["Setup"]
    assert document_title("    # code\n\nText.\n", fallback="none") == "none"
