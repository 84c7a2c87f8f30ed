from __future__ import annotations

import io
import time

import pytest
from pypdf import PdfReader, PdfWriter

from services.retrieval.chunking import chunk_text, document_title
from services.retrieval.errors import UnprocessableDocument, UnsupportedMediaType
from services.retrieval.parsing import ParsedDocument, format_of, parse
from tests.unit.retrieval.files import (
    GUIDE_HTML,
    make_pdf,
    pdf_encrypted_with_aes,
    pdf_mapping_to_unicode,
    pdf_printing,
    pdf_without_pages,
)

pytestmark = pytest.mark.unit


def sections(parsed: ParsedDocument) -> list[tuple[str, str]]:
    """(section, text) of each chunk the parsed document gives, checking each chunk's span."""
    chunks = chunk_text(
        parsed.text, count_tokens=lambda text: len(text.split()), chunk_size=500, chunk_overlap=0,
        markdown=parsed.markdown, page_starts=parsed.page_starts, section_starts=parsed.section_starts,
        code_blocks=parsed.code_blocks,
    )
    for chunk in chunks:
        assert parsed.text[chunk.char_start : chunk.char_end] == chunk.text
    return [(c.section, c.text) for c in chunks]


def test_markdown_keeps_its_text_and_takes_the_first_heading_as_title() -> None:
    parsed = parse("notes/guide.md", "\ufeff# Guide\n\nSome text.\n".encode())
    assert (parsed.format, parsed.markdown, parsed.title, parsed.pages) == ("markdown", True, "Guide", None)
    assert parsed.text == "# Guide\n\nSome text.\n", "the byte-order mark is dropped"


def test_plain_text_is_not_markdown() -> None:
    parsed = parse("todo.TXT", b"# not a heading\nbuy milk")
    assert (parsed.format, parsed.markdown, parsed.title) == ("text", False, None)


def test_html_keeps_headings_as_sections_and_drops_page_furniture() -> None:
    parsed = parse("site/pump.html", GUIDE_HTML)
    assert (parsed.format, parsed.title) == ("html", "Pump guide")
    text = parsed.text
    assert "## Installation" in text and "### Wiring" in text and "## Maintenance" in text
    assert "The pump moves water from the well to the tank." in text
    assert "- Use four bolts." in text and "Filter | monthly" in text
    assert "```\n# keep this comment\npump --start\n```" in text, "code is fenced so '#' lines are no headings"
    for dropped in ("secret-script-text", "navigation-only-words", "color: red"):
        assert dropped not in text
    assert text.startswith("# Pump guide"), "the <title> names the page but is not its text"
    assert [section for section, _ in sections(parsed)] == ["", "Installation", "Installation > Wiring", "Maintenance"]


def test_hidden_elements_and_the_page_footer_are_left_out() -> None:
    page = b"""<html><body><h1>Pump</h1><p>Visible text.</p>
<div hidden>hidden-attribute-words</div><p style="color: red; display:none">display-none-words</p>
<span style="visibility: hidden !important">invisible-words</span><div role="navigation">role-nav-words</div>
<section hidden="until-found">Found by find-in-page.</section>
<article><p>Article body.</p><footer>Written by Ada.</footer></article>
<footer>Copyright site-footer-words</footer><div role="contentinfo">contentinfo-words</div>
</body></html>"""
    text = parse("pump.html", page).text
    assert "Visible text." in text and "Found by find-in-page." in text
    assert "Written by Ada." in text, "an article's own footer is part of it"
    for dropped in ("hidden-attribute", "display-none", "invisible", "role-nav", "site-footer", "contentinfo"):
        assert dropped not in text


def test_an_html5_page_whose_head_is_never_closed_keeps_its_body() -> None:
    page = b'<html><head><meta charset="utf-8"><title>Unclosed head</title><h1>Hello</h1><p>Body text here.</p></html>'
    parsed = parse("page.html", page)
    assert (parsed.title, parsed.text) == ("Unclosed head", "# Hello\n\nBody text here.")


def test_text_after_the_body_is_kept() -> None:
    parsed = parse("page.html", b"<html><body><p>Inside.</p></body><p>After the body.</p></html>")
    assert parsed.text == "Inside.\n\nAfter the body."


def test_the_title_of_a_fragment_names_it_but_is_not_its_text() -> None:
    parsed = parse("part.html", b"<title>Pump notes</title><p>Prime the pump.</p><svg><title>icon</title></svg>")
    assert (parsed.title, parsed.text) == ("Pump notes", "Prime the pump.")


def test_a_code_block_with_backtick_fences_inside_is_fenced_whole() -> None:
    parsed = parse("code.html", b"<pre>```\nnot the end\n```</pre>")
    assert parsed.text == "````\n```\nnot the end\n```\n````"


def test_a_table_row_starting_with_a_hash_is_kept_as_written_and_opens_no_section() -> None:
    page = b"<h1>Guide</h1><h2>Steps</h2><table><tr><th>#</th><th>Step</th></tr><tr><td>1</td><td>Unpack</td></tr></table>"
    parsed = parse("steps.html", page)
    assert sections(parsed) == [("Steps", "# Guide\n\n## Steps\n\n# | Step\n\n1 | Unpack")]


def test_a_page_without_a_title_or_h1_takes_none_from_text_that_looks_like_a_heading() -> None:
    parsed = parse("steps.html", b"<table><tr><th>#</th><th>Step</th></tr></table><p># 1 rule</p>")
    assert parsed.title is None
    assert document_title(parsed.text, fallback="steps", markdown=parsed.markdown) == "steps"


def test_html_source_line_breaks_are_spaces_and_only_br_breaks_a_line() -> None:
    """A paragraph wrapped in the page's source is one line: cut at its source lines, its chunks split sentences
    that fit a chunk."""
    page = b"<p>The pump moves water from\nthe well to the tank. It needs\n  power and a dry wall.</p><p>Call us<br>\nat noon."
    parsed = parse("pump.html", page)
    assert parsed.text == (
        "The pump moves water from the well to the tank. It needs power and a dry wall.\n\nCall us\nat noon."
    )
    chunks = chunk_text(parsed.text, count_tokens=lambda text: len(text.split()), chunk_size=10, chunk_overlap=0)
    assert [chunk.text for chunk in chunks] == [
        "The pump moves water from the well to the tank.", "It needs power and a dry wall.", "Call us\nat noon."
    ]


def test_a_list_item_is_marked_whether_its_text_is_bare_or_in_a_paragraph() -> None:
    page = b"<ul><li>Bare.</li><li><p>In a paragraph.</p><p>Its second.</p></li><li>Outer<ul><li>inner</li></ul></li></ul>"
    assert parse("list.html", page).text == "- Bare.\n\n- In a paragraph.\n\nIts second.\n\n- Outer\n\n- inner"


def test_a_list_items_heading_or_code_is_written_as_it_is_and_its_marker_goes_no_further() -> None:
    page = b"<ol><li><h3>Step</h3><p>Unpack.</p></li><li></li></ol><p>After.</p><ul><li><pre>make</pre></li></ul>"
    parsed = parse("list.html", page)
    assert parsed.text == "### Step\n\nUnpack.\n\nAfter.\n\n```\nmake\n```"


def test_a_headings_permalink_sign_is_left_out_of_its_section_and_title() -> None:
    page = (
        '<h1 id="pump">Pump<a class="headerlink" href="#pump">\u00b6</a></h1><h2 id="w">Wiring <a href="#w">#</a></h2>'
        '<p>Brown is live.</p><h2><a href="#steps">Steps 1</a> to <a href="#3">3</a></h2><p>Unpack.</p>'
    )
    parsed = parse("pump.html", page.encode())
    assert parsed.title == "Pump"
    assert sections(parsed) == [
        ("Wiring", "# Pump\n\n## Wiring\n\nBrown is live."), ("Steps 1 to 3", "## Steps 1 to 3\n\nUnpack.")
    ]


def test_html_pre_blocks_are_reported_as_code_blocks_fences_included() -> None:
    parsed = parse("page.html", b"<h2>Run</h2><pre>make\n\nmake up</pre><p>then</p><pre>``x``</pre>")
    assert [parsed.text[start:end] for start, end in parsed.code_blocks] == ["```\nmake\n\nmake up\n```", "```\n``x``\n```"]


def test_html_pre_lines_broken_by_br_stay_lines() -> None:
    """Rich-text editors write a code block's line breaks as <br>: they ran its lines together ("a = 1b = 2")."""
    parsed = parse("page.html", b"<pre>a = 1<br>b = 2<br/>c = 3</pre>")
    assert parsed.text == "```\na = 1\nb = 2\nc = 3\n```"


def test_html_form_controls_are_left_out_or_kept_apart_from_the_words_around_them() -> None:
    html = (
        "<p>Pick a size<select><option>small</option><optgroup><option>large</option></optgroup></select>then"
        "<datalist><option value='x'>suggested</option></datalist> go.</p>"
        "<p>Name<input value='prefilled'>Notes<textarea>draft</textarea>Save<button>Copy</button>done</p>"
    )
    assert parse("form.html", html.encode()).text == "Pick a size then go.\n\nName Notes draft Save Copy done"


def test_html_title_falls_back_to_the_first_h1_and_honours_the_declared_charset() -> None:
    page = '<html><head><meta charset="iso-8859-1"></head><body><h1>Caf\xe9</h1><p>cr\xe8me br\xfbl\xe9e</p></body></html>'
    parsed = parse("menu.htm", page.encode("latin-1"))
    assert parsed.title == "Café"
    assert "crème brûlée" in parsed.text


def test_a_page_labelled_latin1_is_read_as_windows_1252_as_browsers_do() -> None:
    page = b'<meta charset="iso-8859-1"><p>He said \x93fine\x94 \x96 it\x92s \x805</p>'
    assert parse("quotes.html", page).text == "He said \u201cfine\u201d \u2013 it\u2019s \u20ac5"


def test_a_page_without_a_declared_charset_is_utf8_else_windows_1252_never_a_guess() -> None:
    german = (
        "Die Sicherung l\xe4uft jede Nacht. Pr\xfcfen Sie, ob die Festplatte angeschlossen ist, bevor Sie das B\xfcro "
        "verlassen; sonst schl\xe4gt die Kopie fehl und das Team erh\xe4lt eine Nachricht \xfcber den Fehler."
    )
    page = f"<html><body><p>{german}</p></body></html>"
    assert parse("legacy.html", page.encode("cp1252")).text == german, "a guess read this as Baltic (cp775)"
    assert parse("modern.html", page.encode("utf-8")).text == german


def test_a_utf8_page_with_a_stale_legacy_charset_is_read_as_utf8() -> None:
    page = '<meta charset="windows-1252"><title>Caf\xe9</title><p>cr\xe8me br\xfbl\xe9e</p>'.encode("utf-8")
    parsed = parse("saved.html", page)
    assert (parsed.title, parsed.text) == ("Caf\xe9", "cr\xe8me br\xfbl\xe9e")


def test_a_charset_declared_after_a_long_inline_script_is_honoured() -> None:
    """Only the first 2 KB (or 5 %) of a page were searched for its <meta charset>: a Russian page declaring
    windows-1251 after its scripts came out as Latin letters ("\xcf\xf0\xe8\xe2\xe5\xf2")."""
    script = "var x = 1;\n" * 400
    page = f'<head><script>{script}</script><meta charset="windows-1251"><title>Привет</title></head><p>мир</p>'
    parsed = parse("news.html", page.encode("cp1251"))
    assert (parsed.title, parsed.text) == ("Привет", "мир")


def test_the_charset_of_a_page_of_unclosed_meta_tags_is_found_in_linear_time() -> None:
    """BeautifulSoup's search for the declaration was quadratic in the part of the page it read: 2.4 MB of
    '<meta ' (and one byte that is not UTF-8) took 29 seconds, 20 MB hours of retrieval's CPU. A guard
    against the quadratic search, not a speed target."""
    started = time.perf_counter()
    assert parse("crafted.html", b"<meta " * 400_000 + b"<p>x\xe9</p>").text == "x\xe9"
    assert time.perf_counter() - started < 5


def test_a_page_ending_in_tags_that_never_close_is_read_in_linear_time() -> None:
    """Python's html.parser (before 3.11.13) read markup that no '>' closes at the end of a page as text,
    scanning the rest of the page again from each of its '<': 120 KB of '<a x="' took 20 seconds of
    retrieval's CPU, 20 MB would take days. HTML5 drops such a cut-off tag. A guard against the quadratic
    scan, not a speed target."""
    started = time.perf_counter()
    assert parse("cut.html", b"<p>Intro</p>" + b'<a x="' * 100_000).text == "Intro"
    assert parse("cut.html", b"<p>Intro <b>bold</b> end" + b"<!--" * 100_000).text == "Intro bold end"
    assert parse("cut.html", b"<p>1 < 2 <").text == "1 < 2 <"  # a '<' that opens no markup is text
    assert time.perf_counter() - started < 5


def test_a_utf16_page_is_read_by_its_byte_order_mark() -> None:
    assert parse("wide.html", "<h1>Caf\xe9</h1><p>cr\xe8me</p>".encode("utf-16")).text == "# Caf\xe9\n\ncr\xe8me"


def test_a_paragraph_starting_with_a_hash_does_not_become_a_heading_and_is_kept_as_written() -> None:
    parsed = parse("x.html", b"<h1>T</h1><h2>Rules</h2><p># 1 rule: be kind</p><p>## 2 rule: be brief</p>")
    assert sections(parsed) == [("Rules", "# T\n\n## Rules\n\n# 1 rule: be kind\n\n## 2 rule: be brief")]


def test_markdown_front_matter_gives_the_title_and_is_not_indexed() -> None:
    parsed = parse("notes.md", b"---\ntitle: Pump notes\n---\n# Pumps\n\nPrime it first.\n")
    assert parsed.title == "Pump notes"
    assert sections(parsed) == [("", "# Pumps\n\nPrime it first.")]


def test_pdf_gives_one_text_per_page_with_its_start_offset() -> None:
    data = make_pdf(["Installation of the pump.", "", "Maintenance: replace the filter."], title="Pump manual")
    parsed = parse("manual.pdf", data)
    assert (parsed.format, parsed.markdown, parsed.title, parsed.pages) == ("pdf", False, "Pump manual", 3)
    starts = parsed.page_starts
    assert starts[0] == 0
    assert parsed.text[starts[0] :].startswith("Installation of the pump.")
    assert parsed.text[starts[2] :].startswith("Maintenance: replace the filter.")
    assert parsed.text[starts[1] : starts[2]].strip() == "", "a blank page keeps its number"


def test_a_pdf_outline_gives_sections_found_where_their_headings_are_printed() -> None:
    data = make_pdf(
        [
            [(None, "Preface text."), (0, "Setup"), (None, "Unpack the pump.")],
            [(None, "Still setting up."), (1, "Wiring"), (None, "Brown is live.")],
            [(0, "Care"), (None, "Dust it.")],
        ]
    )
    parsed = parse("manual.pdf", data)
    sections = [(parsed.text[offset:].split("\n")[0], path) for offset, path in parsed.section_starts]
    assert sections == [("Setup", "Setup"), ("Wiring", "Setup > Wiring"), ("Care", "Care")]


def test_a_pdf_heading_with_only_a_sub_heading_under_it_is_no_chunk_of_its_own() -> None:
    """As in Markdown, the heading opens its first sub-heading's section: its title alone was a chunk ("Setup")."""
    data = make_pdf([[(None, "Preface text."), (0, "Setup"), (1, "Wiring"), (None, "Brown is live."), (0, "Care"),
                      (None, "Dust it.")]])
    parsed = parse("manual.pdf", data)
    assert sections(parsed) == [
        ("", "Preface text."), ("Setup > Wiring", "Setup\nWiring\nBrown is live."), ("Care", "Care\nDust it.")
    ]


def test_pdf_bookmark_titles_have_their_ligatures_written_out_like_the_page_text() -> None:
    """Typesetting programs write a heading's ligatures into its bookmark as they print them on the page."""
    printed = make_pdf(["Preface.\nAir filters\nThey clean the air.\nOffice units\nDust them."])
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(printed)))
    chapter = writer.add_outline_item(title="Air \ufb01lters", page_number=0)
    writer.add_outline_item(title="O\ufb03ce units", page_number=0, parent=chapter)
    data = io.BytesIO()
    writer.write(data)
    parsed = parse("manual.pdf", data.getvalue())
    assert [(parsed.text[offset:].split("\n")[0], path) for offset, path in parsed.section_starts] == [
        ("Air filters", "Air filters"), ("Office units", "Air filters > Office units")
    ]


def test_pdf_ligatures_are_written_out_in_their_letters() -> None:
    parsed = parse("paper.pdf", pdf_printing([b"\\001nd the \\002ow of an e\\003cient pump"]))
    assert parsed.text == "find the flow of an efficient pump"


@pytest.mark.parametrize(
    ("name", "data", "text"),
    [
        ("notes.md", "# The \ufb01le\n\ne\ufb00ort, \ufb03x, \ufb04y, \ufb06ar\n", "# The file\n\neffort, ffix, ffly, star\n"),
        ("notes.txt", "a \ufb01le", "a file"),
        ("page.html", "<h1>\ufb01les</h1><p>the \ufb02ow</p>", "# files\n\nthe flow"),
    ],
)
def test_ligatures_are_written_out_in_every_format(name: str, data: str, text: str) -> None:
    assert parse(name, data.encode()).text == text


def test_html_headings_after_a_ligature_still_start_their_sections() -> None:
    parsed = parse("page.html", "<p>\ufb01rst \ufb03x</p><h2>Next</h2><p>more</p>".encode())
    assert sections(parsed) == [("", "first ffix"), ("Next", "## Next\n\nmore")]


def test_a_pdf_font_mapping_glyphs_to_halves_of_surrogate_pairs_gives_text_that_can_be_stored() -> None:
    """A broken math font's map gives each glyph half a character: two halves in a row are that character,
    a half alone is no character at all. Kept as they came, they made the ingest fail with a 500."""
    parsed = parse("paper.pdf", pdf_mapping_to_unicode(b"x \\001\\002 y \\001 z", {1: b"D835", 2: b"DC00"}))
    assert parsed.text == "x \U0001d400 y \ufffd z"
    parsed.text.encode("utf-8")


def test_a_pdf_word_hyphenated_at_a_line_end_is_joined() -> None:
    data = make_pdf(["The retrie-\nval service, from Hewlett-\nPackard, ran 2020-\n2021."])
    assert parse("paper.pdf", data).text == "The retrieval service, from Hewlett-\nPackard, ran 2020-\n2021."


def test_a_pdf_soft_hyphen_is_dropped_with_the_line_break_after_it() -> None:
    parsed = parse("letter.pdf", pdf_printing([b"the retrie\xad", b"val of Ver\xadsion", b"Two"]))
    assert parsed.text == "the retrieval of Version\nTwo"


def test_a_running_header_is_kept_once_and_page_counters_are_left_out_of_every_page() -> None:
    bodies = ["Prime the pump.", "Replace the filter.", "", "Drain it.\nPage 3 of 5", "Done."]
    pages = [f"ACME pump manual\nRev 2\n{body}\nPage {n} of 5" if body else "" for n, body in enumerate(bodies, 1)]
    parsed = parse("manual.pdf", make_pdf(pages))
    assert [parsed.text[start:].split("\n\n")[0] for start in parsed.page_starts] == [
        "ACME pump manual\nRev 2\nPrime the pump.", *bodies[1:]
    ], "the header's words are found once, on its first page; a line repeated on one page only stays"
    assert sections(parsed)[0] == ("", "ACME pump manual\nRev 2\nPrime the pump.")


def test_a_table_header_repeated_on_every_page_stays_where_the_table_starts() -> None:
    rows = ["Filter monthly\nSeal yearly", "Hose every two years\nValve never", "Pump body each decade\nBolts never"]
    from_the_top = parse("parts.pdf", make_pdf([f"Part Interval\n{row}" for row in rows]))
    assert from_the_top.text.split("\n\n") == [f"Part Interval\n{rows[0]}", *rows[1:]]
    under_a_running_header = parse(
        "parts.pdf",
        make_pdf(
            [
                "ACME parts\nThe table lists the intervals.\nPart Interval\nGasket yearly",
                *(f"ACME parts\nPart Interval\n{row}" for row in rows),
            ]
        ),
    )
    assert under_a_running_header.text.split("\n\n") == [
        "ACME parts\nThe table lists the intervals.\nPart Interval\nGasket yearly", *rows
    ], "the header row is said once, where the table starts, even when that is not at the top of a page"


def test_lines_repeated_on_too_few_pages_are_kept() -> None:
    two_pages = parse("short.pdf", make_pdf(["Pump notes\nPrime it.", "Pump notes\nDrain it."]))
    assert two_pages.text == "Pump notes\nPrime it.\n\nPump notes\nDrain it."
    once_in_three = parse("notes.pdf", make_pdf(["Pump notes\nPrime it.", "Drain it.\nStore it.", "Store it dry."]))
    assert once_in_three.text.startswith("Pump notes\nPrime it.")


def test_a_pdf_without_a_title_in_its_metadata_has_none() -> None:
    assert parse("a.pdf", make_pdf(["text"])).title is None


@pytest.mark.parametrize(
    ("filename", "data", "reason"),
    [
        ("broken.pdf", b"%PDF-1.4\n1 0 obj garbage", "not a readable PDF"),
        ("broken.pdf", b"this is not a pdf at all", "not a readable PDF"),
        ("scan.pdf", make_pdf(["", ""]), "no extractable text"),
        ("locked.pdf", pdf_encrypted_with_aes(), "encrypted"),
        ("no-pages.pdf", pdf_without_pages(), "has no pages"),
        ("empty.pdf", b"", "empty"),
        ("empty.md", b"  \n\t", "empty"),
        ("front-matter-only.md", b"---\ntitle: Draft\n---\n\n", "no text after its front matter"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
        ("cut.txt", "caf\xe9".encode("utf-16")[:-1], "not UTF-16"),  # a BOM, then an odd number of bytes
        ("utf16-no-bom.txt", "caf\xe9".encode("utf-16-le"), "not UTF-8"),  # no BOM: not guessed
        ("binary.md", b"abc\x00def", "binary content, not text: it holds NUL characters (U+0000)"),
        ("binary.html", b"<p>abc\x00def</p>", "binary content, not text: it holds NUL characters (U+0000)"),
        ("empty.html", b"<html><head><title>t</title><script>x()</script></head><body> </body></html>", "no text"),
    ],
    ids=lambda value: "data" if isinstance(value, bytes) else None,  # a PDF's bytes hold its creation time
)
def test_corrupt_or_empty_files_are_unprocessable_and_named(filename: str, data: bytes, reason: str) -> None:
    with pytest.raises(UnprocessableDocument) as raised:
        parse(filename, data)
    assert raised.value.status_code == 422 and raised.value.code == "unprocessable_document"
    assert raised.value.message.startswith(f"{filename}: ") and reason in raised.value.message


def test_a_pdf_that_a_truncated_download_cut_short_is_unprocessable() -> None:
    data = make_pdf(["first page", "second page"])
    with pytest.raises(UnprocessableDocument):
        parse("cut.pdf", data[: len(data) // 3])


@pytest.mark.parametrize("filename", ["report.docx", "photo.png", "README", "archive.tar.gz"])
def test_unsupported_types_name_the_file_and_the_supported_ones(filename: str) -> None:
    with pytest.raises(UnsupportedMediaType) as raised:
        parse(filename, b"whatever")
    assert raised.value.status_code == 415 and raised.value.code == "unsupported_media_type"
    assert filename in raised.value.message and ".pdf" in raised.value.message and ".md" in raised.value.message


def test_a_name_without_suffix_is_read_by_its_media_type() -> None:
    assert format_of("README", "text/markdown; charset=utf-8") == "markdown"
    assert format_of("page", "text/html") == "html"
    assert format_of("notes.md", "application/pdf") == "markdown", "a known suffix wins"
    assert format_of("photo.png", "text/plain") is None, "an unknown suffix is not rescued by the media type"
    assert parse("README", b"# Read me\n\ntext", media_type="text/markdown").title == "Read me"


@pytest.mark.parametrize("method", ["AES_128", "AES_256"])
def test_a_pdf_encrypted_with_aes_that_opens_without_a_password_is_read(method: str) -> None:
    """Copy- or print-protected PDFs are often encrypted with AES and an empty user password."""
    from fpdf import FPDF
    from fpdf.enums import EncryptionMethod

    pdf = FPDF()
    pdf.set_encryption(owner_password="the owner's", encryption_method=getattr(EncryptionMethod, method))
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.multi_cell(0, 6, "Invoices are archived for ten years.")
    parsed = parse("protected.pdf", bytes(pdf.output()))
    assert "Invoices are archived for ten years." in parsed.text


def test_a_pdf_whose_text_unpacks_past_the_documents_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few hundred KB of compressed text streams can unpack to a hundred million characters."""
    from fpdf import FPDF

    from services.retrieval.parsing import pdf as pdf_parser

    pdf = FPDF()
    pdf.set_font("helvetica", size=8)
    for _ in range(3):
        pdf.add_page()
        pdf.multi_cell(0, 4, "Pumps move water from the well to the tank. " * 20)
    monkeypatch.setattr(pdf_parser, "MAX_DOCUMENT_CHARS", 1500)  # the limit, scaled down to a PDF written quickly
    with pytest.raises(UnprocessableDocument, match=r"^bomb\.pdf: the PDF holds more than 1,500 characters of text"):
        parse("bomb.pdf", bytes(pdf.output()))
    monkeypatch.setattr(pdf_parser, "MAX_DOCUMENT_CHARS", 10_000)
    assert len(parse("bomb.pdf", bytes(pdf.output())).page_starts) == 3, "under the limit, every page is read"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_text_with_its_byte_order_mark_is_read(encoding: str) -> None:
    """What Windows' Notepad ("Unicode") and PowerShell's `>` write."""
    text = "# Caf\xe9 notes\r\n\r\nCr\xe8me br\xfbl\xe9e, \u4e2d\u6587.\r\n"
    data = ("\ufeff" + text).encode(encoding) if encoding != "utf-16" else text.encode(encoding)
    parsed = parse("notes.md", data)
    assert parsed.text == text and parsed.title == "Caf\xe9 notes"
    assert parse("notes.txt", data).text == text


def test_a_table_that_lays_out_the_page_keeps_its_headings_code_and_furniture_rules() -> None:
    """Legacy pages and HTML mail put the whole page in a table: read as one row, it lost every section, ran its
    code block onto one line and kept its navigation."""
    page = (
        b"<table><tr><td><nav>Home | About</nav></td><td><h1>Pump</h1><p>It moves water.</p><h2>Wiring</h2>"
        b"<p>Brown is live.</p><ul><li>Fuse it.</li></ul><pre>pump --start\n  --fast</pre></td></tr></table>"
    )
    parsed = parse("pump.html", page)
    assert sections(parsed) == [
        ("", "# Pump\n\nIt moves water."),
        ("Wiring", "## Wiring\n\nBrown is live.\n\n- Fuse it.\n\n```\npump --start\n  --fast\n```"),
    ]


def test_a_table_cell_leaves_out_what_the_page_leaves_out() -> None:
    page = (
        b"<table><tr><th>Part</th><th>Price</th></tr><tr><td>Pump<span style='display: none'>sku-4411</span></td>"
        b"<td>5<select><option>EUR</option><option>USD</option></select><nav>compare</nav></td></tr></table>"
    )
    assert parse("parts.html", page).text == "Part | Price\n\nPump | 5"
