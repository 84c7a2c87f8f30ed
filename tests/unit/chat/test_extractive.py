"""The offline generator as a baseline: on the demo collection (docs/*.md, the passages the bench
times), what it answers, what it refuses, and how it picks, dedupes, cites and orders sentences."""
import re

import pytest

from bench.chat_grounding import demo_passages, top_passages
from services.chat.citations import lacks_information, resolve_citations
from services.chat.context_format import ContextBlock
from services.chat.grounding import check_grounding
from services.chat.offline_llm.extractive import (
    INSUFFICIENT,
    MAX_SENTENCES,
    answer,
    candidate_sentences,
    question_weights,
    similarity,
)

pytestmark = pytest.mark.unit

DOCS = demo_passages()


def context(question: str):
    chunks = top_passages(question, DOCS)
    return chunks, [ContextBlock(i + 1, c.heading, c.content) for i, c in enumerate(chunks)]


def ask(question: str) -> str:
    return answer(question, context(question)[1])


def test_the_refusal_is_recognised_by_the_pipeline():
    assert lacks_information(INSUFFICIENT)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How do I add a user?", "cairn user add NAME --role user"),
        ("What is the TTL of a session?", "SESSION_TTL_SECONDS"),
        ("How do I scale retrieval?", "--scale"),
        ("How do I log out?", "POST /auth/logout"),
        ("How long does a token last?", "24 hours"),
        ("What happens when RabbitMQ is down?", "RabbitMQ is down"),
        ("Does Cairn support Kubernetes?", "deploy/k8s"),
    ],
)
def test_questions_the_docs_answer_get_cited_sentences(question, expected):
    text = ask(question)
    assert expected in text and re.search(r"\[\d\]", text)
    assert not lacks_information(text)


@pytest.mark.parametrize(
    "question",
    [
        "What is the capital of France?",
        "Who won the 1998 World Cup?",
        "What is the user's favourite colour?",  # shares "user" with the docs
        "Does Cairn support Oracle?",  # shares "cairn" and "support"
        "How do I reset a forgotten password?",  # shares "password"
    ],
)
def test_questions_the_docs_do_not_answer_get_the_refusal(question):
    assert ask(question) == INSUFFICIENT


def test_a_word_that_only_shapes_the_question_does_not_count_against_every_sentence():
    """"whose" was weighed as a content term: no sentence had it, and with its weight counted against each of
    them the best sentences fell short of MIN_SIMILARITY, so the question got the refusal."""
    question = "What happens to a session whose record is damaged?"
    _, blocks = context(question)
    assert set(question_weights(question, candidate_sentences(blocks))) == {"session", "record", "damag"}
    text = answer(question, blocks)
    assert text != INSUFFICIENT and re.search(r"\[\d\]", text)


def test_similarity_is_the_idf_weighted_share_of_question_terms():
    # Passages of its own: the demo docs change with every edit, and with them which word is rarer.
    blocks = [
        ContextBlock(1, "Scaling", "Run more retrieval replicas to scale out. Retrieval answers every search."),
        ContextBlock(2, "Retrieval", "Retrieval keeps the keyword index in memory. Retrieval starts in seconds."),
    ]
    weights = question_weights("How do I scale retrieval?", candidate_sentences(blocks))
    assert set(weights) == {"scal", "retrieval"}
    assert weights["scal"] > weights["retrieval"]  # "scale" is the rarer word in the context
    assert similarity(weights, frozenset({"scal", "retrieval", "other"})) == 1.0
    assert 0 < similarity(weights, frozenset({"retrieval"})) < 0.5
    assert similarity({}, frozenset({"x"})) == 0.0


def test_a_sentence_repeated_by_overlapping_passages_is_used_once():
    sentence = "To rotate the key, run the cairn key rotate command."
    blocks = [
        ContextBlock(1, "Keys", f"Keys sign the tokens. {sentence}"),
        ContextBlock(2, "Keys", f"{sentence} Old keys stay valid for a day."),
    ]
    text = answer("How do I rotate the key?", blocks)
    assert text.count("cairn key rotate") == 1 and "[1]" in text and "[2]" not in text


def test_a_near_duplicate_is_left_out():
    blocks = [
        ContextBlock(1, "a", "To rotate the signing key, run the cairn key rotate command now."),
        ContextBlock(2, "b", "To rotate the signing key, run the cairn key rotate command at once."),
    ]
    assert answer("How do I rotate the signing key?", blocks).count("cairn key rotate") == 1


def test_at_most_max_sentences_grouped_by_passage_in_reading_order():
    blocks = [
        ContextBlock(1, "a", "Backups of the whole collection run every night at two. Backups are kept for seven days."),
        ContextBlock(2, "b", "Backups go to S3. Backups of single documents can be restored with the restore command."),
    ]
    # Every sentence covers the question; the shortest ("Backups go to S3.") ranks first, so passage 2
    # leads, its sentences in their own order, then the best of passage 1; the fourth is left out.
    assert answer("Tell me about backups", blocks) == (
        "Backups go to S3 [2]. Backups of single documents can be restored with the restore command [2]. "
        "Backups are kept for seven days [1]."
    )
    assert MAX_SENTENCES == 3


def test_a_sentence_announcing_a_list_is_not_used():
    blocks = [ContextBlock(1, "Ports", "The services listen on these ports:\n- gateway: 8000\n- chat: 8001")]
    text = answer("Which ports do the services listen on?", blocks)
    assert "these ports:" not in text


def test_a_two_part_question_is_answered_by_two_sentences():
    blocks = [
        ContextBlock(1, "Operations", "Redis keeps the login sessions. RabbitMQ carries events to analytics."),
        ContextBlock(2, "Users", "Passwords are hashed with argon2 before they are stored."),
    ]
    text = answer("Where are login sessions kept, and how are passwords hashed?", blocks)
    assert "Redis keeps the login sessions [1]." in text and "hashed with argon2" in text


def test_its_answers_pass_the_grounding_check():
    chunks, blocks = context("How do I add a user?")
    cited = resolve_citations(answer("How do I add a user?", blocks), chunks)
    report = check_grounding(cited.answer, cited.citations, passages=chunks)
    assert cited.citations and report.summary.score == 1.0 and report.summary.unsupported == 0
