"""Document files written by the tests themselves: real PDFs (fpdf2) and HTML pages."""
from __future__ import annotations

from fpdf import FPDF

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
