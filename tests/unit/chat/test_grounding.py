import pytest

from services.chat.citations import Citation, resolve_citations
from services.chat.grounding import (
    METHOD,
    SUPPORTED_AT,
    WEAK_AT,
    check_grounding,
    cited_sentences,
    term_weights,
    verdict_of,
)
from tests.unit.chat.fakes import make_chunk

pytestmark = pytest.mark.unit

EXPIRY = make_chunk(
    1,
    "## Token expiry\nA token lasts for 24 hours after its last use. Tokens expire after 24 hours of inactivity. "
    "The expiry is sliding: every request made with the token pushes the expiry back by another 24 hours. "
    "To change the lifetime, set `SESSION_TTL_SECONDS` on the gateway (the default is 86400 seconds).",
)
PASSWORDS = make_chunk(
    2,
    "## How passwords are stored\nCairn never stores a password. It stores an argon2 hash of the password, "
    "which is slow to compute on purpose so that a stolen hash is hard to crack. User records live in Redis.",
)
ADDING = make_chunk(
    3,
    "## Adding a user\nTo add a user, run `cairn user add NAME --role user`, replacing NAME with the user name. "
    "The command asks for the new user's password at a prompt, then asks for it again to confirm it.",
)
PASSAGES = [EXPIRY, PASSWORDS, ADDING]


def grounded(answer: str, chunks=PASSAGES):
    cited = resolve_citations(answer, chunks)
    return check_grounding(cited.answer, cited.citations, passages=chunks)


def only_sentence(answer: str, chunks=PASSAGES):
    (sentence,) = grounded(answer, chunks).sentences
    return sentence


def test_a_sentence_copied_from_its_passage_is_supported():
    sentence = only_sentence("A token lasts for 24 hours after its last use [1].")
    assert (sentence.verdict, sentence.score) == ("supported", 1.0)
    assert sentence.text == "A token lasts for 24 hours after its last use." and sentence.numbers == (1,)


@pytest.mark.parametrize(
    "answer",
    [
        "Every request made with the token pushes its expiry back by another 24 hours [1].",
        "Passwords are kept only as argon2 hashes, which are deliberately slow to compute [2].",
        "Use the cairn user add command with a name and a role; it prompts for the password twice [3].",
    ],
)
def test_a_faithful_paraphrase_reusing_key_terms_is_supported(answer):
    assert only_sentence(answer).verdict == "supported"


def test_a_paraphrase_with_few_shared_words_is_only_weak():
    sentence = only_sentence("A token stays valid for a day after it was last used [1].")
    assert sentence.verdict == "weak"  # true, but "stays valid for a day" is not the passage's wording


@pytest.mark.parametrize(
    "answer",
    [
        "Cairn ingests PDF files page by page and keeps the page numbers [1].",
        "Tokens are signed JWTs that the gateway verifies with a public key [1].",
        "Cairn encrypts passwords with AES-256 before saving them [2].",
        "Users sign up themselves on the web page [3].",
        "To add a user, call POST /api/users with an admin token [3].",
    ],
)
def test_a_sentence_about_something_else_is_unsupported(answer):
    sentence = only_sentence(answer)
    assert sentence.verdict == "unsupported" and sentence.score < WEAK_AT


def test_chinese_sentences_are_split_at_full_stops_and_checked_by_their_characters():
    tokyo = make_chunk(1, "东京是日本的首都，也是日本最大的城市。东京有很多大学和博物馆。")
    osaka = make_chunk(2, "大阪是日本第二大城市，以美食闻名。")
    report = grounded("东京是日本的首都[1]。巴黎是法国的首都[2]！", [tokyo, osaka])
    assert [(s.text, s.numbers, s.verdict) for s in report.sentences] == [
        ("东京是日本的首都。", (1,), "supported"),
        ("巴黎是法国的首都！", (2,), "unsupported"),
    ]


def test_a_changed_number_costs_the_sentence_its_support():
    right = only_sentence("A token lasts for 24 hours after its last use [1].")
    wrong = only_sentence("A token lasts for 12 hours after its last use [1].")
    assert right.verdict == "supported" and wrong.verdict == "weak"
    assert wrong.score < right.score / 2


def test_a_negation_is_beyond_a_lexical_measure():
    # Documented limitation: "never" is a stopword, so the opposite claim matches the passage.
    assert only_sentence("Cairn stores the password [2].").verdict == "supported"


def test_no_citations_give_an_empty_report_scoring_zero():
    report = check_grounding("Cairn is a RAG service.", [])
    assert report.sentences == [] and report.citations == {}
    summary = report.summary
    assert (summary.score, summary.supported, summary.weak, summary.unsupported) == (0.0, 0, 0, 0)
    assert summary.method == METHOD


def test_sentences_without_a_marker_are_not_checked():
    report = grounded("Cairn is great. A token lasts for 24 hours after its last use [1]. Ask me more!")
    assert [s.text for s in report.sentences] == ["A token lasts for 24 hours after its last use."]


def test_several_citations_in_one_sentence_are_judged_together_and_one_by_one():
    report = grounded(
        "Run `cairn user add NAME --role user`, which asks for the password, and Cairn stores only an argon2 hash "
        "of it [3][2]."
    )
    (sentence,) = report.sentences
    assert sentence.numbers == (1, 2) and sentence.verdict == "supported"  # the two passages together
    assert report.citations[1].score < sentence.score and report.citations[2].score < sentence.score
    assert report.citations[1].verdict in ("supported", "weak")


def test_a_citation_that_backs_nothing_in_its_sentence_is_flagged():
    report = grounded("A token lasts for 24 hours after its last use [1, 3].")
    assert report.sentences[0].verdict == "supported"
    assert report.citations[1].verdict == "supported" and report.citations[2].verdict == "unsupported"
    assert report.summary.supported == 1 and report.summary.unsupported == 1


def test_passages_of_one_page_share_a_number_and_back_its_sentences_together():
    revenue = make_chunk(1, "Revenue grew by 12 percent in the third quarter, driven by exports.", doc_id="report.pdf", page=5)
    leave = make_chunk(2, "Employees receive 25 days of paid vacation each year.", doc_id="report.pdf", page=5)
    answer = "Revenue grew by 12 percent in the third quarter [1]. Employees receive 25 days of paid vacation [2]."
    cited = resolve_citations(answer, [revenue, leave])
    assert cited.answer.endswith("quarter [1]. Employees receive 25 days of paid vacation [1].")
    (citation,) = cited.citations
    assert citation.chunk == revenue and citation.cited_passages == (revenue, leave)
    report = check_grounding(cited.answer, cited.citations, passages=[revenue, leave])
    assert [s.verdict for s in report.sentences] == ["supported", "supported"]
    assert report.citations[1].verdict == "supported"


def test_a_citation_used_by_several_sentences_takes_its_worst():
    report = grounded(
        "A token lasts for 24 hours after its last use [1]. Tokens are signed JWTs verified with a public key [1]."
    )
    assert [s.verdict for s in report.sentences] == ["supported", "unsupported"]
    support = report.citations[1]
    assert (support.verdict, support.score, support.sentences) == ("unsupported", report.sentences[1].score, 2)


def test_the_summary_counts_citations_and_averages_sentences_with_weak_as_half():
    report = grounded(
        "A token lasts for 24 hours after its last use [1]. "
        "A token stays valid for a day after it was last used [1]. "
        "Cairn never stores a password [2]. "
        "Users sign up themselves on the web page [3]."
    )
    assert [s.verdict for s in report.sentences] == ["supported", "weak", "supported", "unsupported"]
    summary = report.summary
    assert summary.score == pytest.approx((1 + 0.5 + 1 + 0) / 4, abs=1e-3)
    assert (summary.supported, summary.weak, summary.unsupported) == (1, 1, 1)  # citations [2], [1], [3]


def test_markers_for_unknown_numbers_are_ignored():
    citation = Citation(number=1, chunk=EXPIRY, snippet="")
    report = check_grounding("A token lasts for 24 hours [1]. Something else [7].", [citation])
    assert [s.numbers for s in report.sentences] == [(1,)]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Run it [1]. Then stop [2].", [("Run it.", (1,)), ("Then stop.", (2,))]),
        ("Run it. [1] Then stop. [2]", [("Run it.", (1,)), ("Then stop.", (2,))]),
        ("Run it [1][2]. Then stop [2, 3].", [("Run it.", (1, 2)), ("Then stop.", (2, 3))]),
        ("Steps:\n- run it [1]\n- stop it [2]\n1. restart [3]", [("run it", (1,)), ("stop it", (2,)), ("restart", (3,))]),
        ("First line [1]\nSecond line [2]", [("First line", (1,)), ("Second line", (2,))]),
        ("A claim on its own.\n[1]", [("A claim on its own.", (1,))]),
        ("Pass a role, e.g. admin [1]. Done.", [("Pass a role, e.g. admin.", (1,))]),
        ("Uncited. Cited [1]! Is it? [2]", [("Cited!", (1,)), ("Is it?", (2,))]),
    ],
)
def test_sentence_splitting_handles_markers_lists_and_line_breaks(answer, expected):
    assert cited_sentences(answer) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("## Expiry [1]\nA token lasts a day. It can be renewed [2].\n## Other\nUncited.",
         [("A token lasts a day.", (1,)), ("It can be renewed.", (2,))]),
        ("## Expiry [1]\n## Passwords\nHashed [2].", [("Expiry", (1,)), ("Hashed.", (2,))]),
        ("## Adding [1]\n```\n# a comment\ncairn user add\n```\nRun it.", [("Run it.", (1,))]),
    ],
)
def test_markers_on_a_heading_cite_the_sentences_of_its_section(answer, expected):
    assert cited_sentences(answer) == expected


def test_a_section_a_cited_heading_does_not_back_is_unsupported():
    report = grounded("## Token expiry [1]\nTokens are kept in Kafka and replicated to three regions.")
    assert [s.text for s in report.sentences] == ["Tokens are kept in Kafka and replicated to three regions."]
    assert report.citations[1].verdict == "unsupported"


@pytest.mark.parametrize(
    "answer",
    [
        "To add a user, run `cairn user add NAME --role user` [1]. In Python, `users[1]` is the second user.",
        "To add a user, run `cairn user add NAME --role user` [1].\n```python\nsecond = users[1]\n```",
    ],
)
def test_brackets_in_code_are_not_citations_to_check(answer):
    report = grounded(answer, [ADDING])
    assert [s.text for s in report.sentences] == ["To add a user, run `cairn user add NAME --role user`."]
    assert report.citations[1].verdict == "supported"


@pytest.mark.parametrize(
    "answer",
    [
        # Brackets that resolve_citations leaves as written: a range of values, a link, code in double backticks.
        "Cairn never stores a password [2]. Argon2 costs are tuned in [0, 1] steps.",
        "Cairn never stores a password [2]. Read [1](https://example.com/argon2) on tuning it.",
        "Cairn never stores a password [2]. Tune it with ``argon2[1]`` in the settings.",
    ],
)
def test_brackets_left_as_written_are_not_checked_as_citations(answer):
    report = grounded(answer)
    assert [s.numbers for s in report.sentences] == [(1,)]
    assert report.citations[1].verdict == "supported"


def test_terms_every_passage_shares_weigh_least():
    weights = term_weights([frozenset({"cairn", "token"}), frozenset({"cairn", "hash"}), frozenset({"cairn", "user"})])
    assert weights["cairn"] == 1.0
    assert weights["token"] > weights["cairn"]


def test_verdict_thresholds():
    assert verdict_of(SUPPORTED_AT) == "supported"
    assert verdict_of(WEAK_AT) == "weak"
    assert verdict_of(WEAK_AT - 0.01) == "unsupported"
