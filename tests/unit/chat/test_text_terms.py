import pytest

from services.chat.text_terms import stem, terms_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "forms",
    [
        ("store", "stores", "stored", "storing"),
        ("user", "users"),
        ("query", "queries"),
        ("use", "uses", "used"),
        ("process", "processes"),
        ("role", "roles"),
    ],
)
def test_word_forms_share_a_stem(forms):
    assert len({stem(word) for word in forms}) == 1


def test_short_words_and_non_plurals_keep_their_ending():
    assert [stem(w) for w in ("need", "status", "analysis", "bed")] == ["need", "status", "analysis", "bed"]


def test_terms_drop_stopwords_and_split_identifiers():
    assert terms_of("How do I set SESSION_TTL_SECONDS?") == ["set", "session", "ttl", "second"]
    assert terms_of("Don't log out when Redis is down") == ["log", "out", "redis", "down"]
    # The words that shape a question or a clause, whatever it is about.
    assert terms_of("Whose session must I end myself, whether or not it may expire?") == ["session", "end", "expir"]


def test_letters_of_any_script_make_words_and_cjk_runs_make_pairs():
    assert terms_of("Größe und café") == ["größ", "und", "café"]  # not cut at the first non-ASCII letter
    assert terms_of("東京の大学 in Tokyo") == ["tokyo", "東京", "京の", "の大", "大学"]


def test_words_of_scripts_written_with_combining_vowel_signs_stay_whole():
    """re's \\w leaves out the vowel signs and viramas inside these words: the check compared single letters."""
    assert terms_of("हिन्दी में खोज") == ["हिन्दी", "में", "खोज"]
    assert terms_of("தமிழ் மொழி") == ["தமிழ்", "மொழி"]


def test_text_that_reads_the_same_gives_the_same_terms_however_its_unicode_is_written():
    composed, decomposed, full_width = "Résumé café", "Re\u0301sume\u0301 cafe\u0301", "Ｒésumé ｃａｆé"
    assert terms_of(composed) == terms_of(decomposed) == terms_of(full_width) == ["résumé", "café"]
