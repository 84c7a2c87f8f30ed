"""Document files written by the tests themselves: real PDFs (fpdf2, pypdf, or written out by hand) and HTML pages."""
from __future__ import annotations

import io

from fpdf import FPDF
from pypdf import PdfWriter

GUIDE_HTML = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Pump guide</title>
<style>body { color: red }</style><script>var tracking = "secret-script-text";</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">navigation-only-words</a></nav>
<h1>Pump guide</h1>
<p>The pump moves <b>water</b> from the well to the tank.</p>
<h2>Installation</h2>
<p>Mount the pump on a dry wall.</p>
<ul><li>Use four bolts.</li><li>Tighten them <i>by hand</i>.</li></ul>
<h3>Wiring</h3>
<p>Connect the brown wire to the live terminal.</p>
<pre># keep this comment
pump --start</pre>
<h2>Maintenance</h2>
<table><tr><th>Part</th><th>Interval</th></tr><tr><td>Filter</td><td>monthly</td></tr></table>
</body></html>
"""


Block = tuple[int | None, str]  # (outline level of a heading, or None for a paragraph; its text)


def make_pdf(pages: list[str | list[Block]], *, title: str | None = None) -> bytes:
    """A real PDF with one page per item: a string (empty = a blank page), or blocks, where a heading
    is printed and also added to the PDF's outline (bookmarks) at its level."""
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("helvetica", size=11)
    for page in pages:
        pdf.add_page()
        for level, text in [(None, page)] if isinstance(page, str) else page:
            if level is not None:
                pdf.start_section(text, level=level)
            if text:
                pdf.set_x(pdf.l_margin)
                pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def pdf_encrypted_with_aes() -> bytes:
    """A one-page PDF whose trailer says it is encrypted with AES-256 (revision 6) and whose keys fit no
    password: opening it takes AES, with or without the cryptography package."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        b"<< /Filter /Standard /V 5 /R 6 /Length 256 /P -4 /O <%s> /U <%s> /OE <%s> /UE <%s> /Perms <%s> >>"
        % (b"11" * 48, b"22" * 48, b"33" * 32, b"44" * 32, b"55" * 16),
    ]
    return _written_out(objects, trailer=b"/Encrypt 4 0 R /ID [<%s> <%s>]" % (b"ab" * 16, b"ab" * 16))


def pdf_printing(lines: list[bytes]) -> bytes:
    """A one-page PDF printing these lines in Helvetica, one under the other, in WinAnsi encoding but for bytes 1,
    2 and 3, which draw the ligature glyphs fi, fl and ffi (as typesetting programs print them): a reader extracts
    those as the characters U+FB01, U+FB02, U+FB03, and byte 0xAD as a soft hyphen."""
    shown = b" Tj 0 -14 Td ".join(b"(%s)" % line for line in lines)
    content = b"BT /F1 12 Tf 72 700 Td %s Tj ET" % shown
    return _written_out(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding << /Type /Encoding "
            b"/BaseEncoding /WinAnsiEncoding /Differences [1 /fi 2 /fl 3 /ffi] >> >>",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        ]
    )


def pdf_mapping_to_unicode(shown: bytes, to_unicode: dict[int, bytes]) -> bytes:
    """A one-page PDF showing `shown` in a font whose ToUnicode map reads byte n as the UTF-16BE code units
    `to_unicode[n]` (hex): a map may give a character half a surrogate pair, as broken math fonts do."""
    entries = b" ".join(b"<%02X> <%s>" % (code, units) for code, units in to_unicode.items())
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Broken def /CMapType 2 def\n"
        b"1 begincodespacerange <00> <FF> endcodespacerange\n"
        b"%d beginbfchar %s endbfchar\n"
        b"endcmap CMapName currentdict /CMap defineresource pop end end" % (len(to_unicode), entries)
    )
    content = b"BT /F1 12 Tf 72 700 Td (%s) Tj ET" % shown
    return _written_out(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(cmap), cmap),
        ]
    )


def _written_out(objects: list[bytes], *, trailer: bytes = b"") -> bytes:
    """A PDF file of these objects (numbered from 1, the first the catalog) with its cross-reference table."""
    pdf = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(pdf))
        pdf += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(pdf)
    pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    pdf += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    pdf += b"trailer\n<< /Size %d /Root 1 0 R %s >>\n" % (len(objects) + 1, trailer)
    pdf += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(pdf)


def pdf_without_pages() -> bytes:
    output = io.BytesIO()
    PdfWriter().write(output)
    return output.getvalue()
