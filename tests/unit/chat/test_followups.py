"""The offline follow-up rules on realistic pairs of questions."""
import time

import pytest

from services.chat.followups import (
    is_follow_up,
    resolve_history,
    rewrite_against,
    rewrite_follow_up,
    subject_of,
    topic_of,
)
from services.chat.ports import Exchange

pytestmark = pytest.mark.unit

SESSIONS = "How are login sessions stored?"


def turn(standalone: str) -> list[Exchange]:
    return [Exchange(question=standalone, standalone=standalone, answer="Redis keeps them [1].")]


@pytest.mark.parametrize(
    ("previous", "follow_up", "standalone"),
    [
        (SESSIONS, "and what about its TTL?", "What about the TTL of login sessions?"),
        ("What about the TTL of login sessions?", "Can it be changed?", "Can the TTL of login sessions be changed?"),
        (SESSIONS, "And the TTL?", "What about the TTL of login sessions?"),
        (SESSIONS, "What about its TTL per user?", "What about the TTL of login sessions per user?"),
        (SESSIONS, "How long do they last?", "How long do login sessions last?"),
        ("How do I add a user?", "Can I do it in bulk?", "Can I add a user in bulk?"),
        ("How do I add a user?", "And how do I remove them?", "How do I remove a user?"),
        ("What is the retention period?", "What is its default value?", "What is the default value of the retention period?"),
        ("What does the gateway do?", "Does it need Redis?", "Does the gateway need Redis?"),
        # Was "How do I configure the gateway need?".
        ("What does the gateway need Redis for?", "How do I configure it?", "How do I configure the gateway?"),
        # Was "Can the gateway need be changed?".
        ("What does the gateway need sessions for?", "Can it be changed?", "Can the gateway be changed?"),
        ("What’s the upload size limit?", "Can I raise it?", "Can I raise the upload size limit?"),
        ("How do I log in to the console?", "What is its URL?", "What is the URL of the console?"),
        # Was "Can I change it? (port does the gateway listen)".
        ("Which port does the gateway listen on?", "Can I change it?", "Can I change the port of the gateway?"),
        ("What temperature does the reactor run at?", "How often is it checked?",
         "How often is the temperature of the reactor checked?"),
        (SESSIONS, "Why?", "Why? (login sessions stored)"),
        (SESSIONS, "What about Redis?", "What about Redis? (login sessions stored)"),
        (SESSIONS, "Is there a limit?", "Is there a limit? (login sessions stored)"),
        (SESSIONS, "Is that configurable?", "Is that configurable? (login sessions stored)"),
        (SESSIONS, "can you say more", "Can you say more (login sessions stored)"),
        (SESSIONS, "Tell me more.", "Tell me more. (login sessions stored)"),
        (SESSIONS, "Explain", "Explain (login sessions stored)"),
        # A leading conjunction goes with the punctuation after it.
        ("How do I add a user?", "Okay. Can I do it in bulk?", "Can I add a user in bulk?"),
        (SESSIONS, "And... what about its TTL?", "What about the TTL of login sessions?"),
        (SESSIONS, "Ok! Why?", "Why? (login sessions stored)"),
    ],
)
def test_follow_ups_are_rewritten_with_the_previous_subject(previous, follow_up, standalone):
    assert is_follow_up(follow_up, turn(previous))
    assert rewrite_follow_up(follow_up, previous) == standalone


@pytest.mark.parametrize(
    "question",
    [
        "How do I add a user?",
        "What is RabbitMQ?",
        "Is it possible to delete a document?",
        "How long does it take to index a PDF?",
        # "to" over 80 characters after "it take": still the impersonal "it"
        "How long does it take for the nightly reindex job of the whole archive collection with every attachment"
        " and note to finish?",
        "How do I delete a user that is disabled?",
        "How does the gateway check its sessions?",
        "How do I configure Redis so that it uses TLS?",
        "Is there a way to export the chat history?",
        "And how do I rotate the API key?",
    ],
)
def test_standalone_questions_are_not_follow_ups(question):
    assert not is_follow_up(question, turn(SESSIONS))


@pytest.mark.parametrize(
    "question", ["如何添加用户？", "Как добавить пользователя?", "Τι είναι η υβριδική αναζήτηση;", "ユーザーを削除するには？"]
)
def test_a_question_in_another_script_is_not_taken_for_one_that_names_nothing(question):
    assert not is_follow_up(question, turn(SESSIONS))
    assert resolve_history([(SESSIONS, "In Redis [1]."), (question, "…")])[-1].standalone == question


def test_nothing_is_a_follow_up_at_the_start_of_a_conversation():
    assert not is_follow_up("and what about its TTL?", [])


def test_a_chain_of_carried_topics_keeps_the_first_subject():
    assert rewrite_follow_up("Any examples?", "Why? (login sessions stored)") == "Any examples? (login sessions stored)"


def test_a_previous_question_without_words_leaves_the_follow_up_alone():
    assert rewrite_follow_up("Why?", "?") == "Why?"


@pytest.mark.parametrize(
    ("question", "subject", "action"),
    [
        (SESSIONS, "login sessions", None),
        ("Where is the audit log written?", "the audit log", None),
        ("How do I add a user?", "a user", "add a user"),
        ("How does retrieval work?", "retrieval", None),
        ("What is stored in Redis?", None, None),
        ("Which roles exist?", None, None),
        ("Which port does the gateway listen on?", "the port of the gateway", None),
        ("What temperature does the Zorblax reactor run at?", "the temperature of the Zorblax reactor", None),
        ("How many chunks does a document make?", "the chunks of a document", None),
        ("How often do replicas sync?", "replicas", None),
        ("What does the gateway need?", "the gateway", None),
        # A name after the verb is its object: not "the gateway need".
        ("What does the gateway need Redis for?", "the gateway", None),
        ("What does Cairn use RabbitMQ for?", "Cairn", None),
        # So is a plural after do-support: "the gateway", not "the gateway need".
        ("What does the gateway need sessions for?", "the gateway", None),
        ("What do replicas store chunks in?", "replicas", None),
        ("What does the gateway process?", "the gateway", None),  # a base form in -ss is a verb
        ("What Does The Gateway Need?", "The Gateway", None),
        ("What does the gateway do with Redis?", None, None),
        # The verb may have an object here: no subject rather than "the gateway use".
        ("What does the gateway use for metrics?", None, None),
        # A question of why asks about an event, which the bracketed topic keeps whole.
        ("Why does the upload fail?", None, None),
        ("Does the gateway need Redis?", None, None),
    ],
)
def test_subjects_come_from_known_question_shapes(question, subject, action):
    assert subject_of(question) == (subject, action)


def test_the_topic_drops_the_question_frame():
    assert topic_of("How do I add a user?") == "add a user"
    assert topic_of(SESSIONS) == "login sessions stored"


def test_a_chain_of_bracketed_rewrites_keeps_the_first_topic():
    first = rewrite_follow_up("Why?", "How are login sessions stored?")
    assert first == "Why? (login sessions stored)"
    assert rewrite_follow_up("And how?", first) == "How? (login sessions stored)"


def test_a_request_for_more_keeps_the_subject_for_the_next_follow_up():
    history = resolve_history(
        [("How do I add a user?", "Run cairn users add [1]."), ("can you say more", "It asks for a role [1].")]
    )
    assert history[-1].standalone == "Can you say more (add a user)"
    assert rewrite_follow_up("Why?", history[-1].standalone) == "Why? (add a user)"


def test_a_bracketed_rewrite_leans_on_the_question_its_topic_came_from():
    history = resolve_history([("How do I add a user?", "Run cairn user add [1]."), ("Why?", "Roles [1].")])
    assert history[-1].standalone == "Why? (add a user)"
    assert rewrite_against("Can I do it in bulk?", history) == "Can I add a user in bulk?"


def test_a_bracketed_topic_whose_question_was_dropped_is_carried_as_it_is():
    history = resolve_history([("What is hybrid search?", "Fusion [1]."), ("Why? (add a user)", "Roles [1].")])
    assert rewrite_against("Can I do it in bulk?", history) == "Can I do it in bulk? (add a user)"


@pytest.mark.parametrize(
    ("previous", "follow_up", "standalone"),
    [
        # Was "Remove one (list the API keys)": the listing's verb searched for beside the removal's.
        ("How do I list the API keys?", "remove one", "Remove one API key"),
        ("How do I list the API keys?", "the second one?", "The second API key?"),
        ("How do I list the API keys?", "Which one is the oldest?", "Which API key is the oldest?"),
        ("How do I list the API keys?", "How do I revoke the old ones?", "How do I revoke the old API keys?"),
        # Was "How do I remove one? (add a user)", which found how to add users rather than how to delete one.
        ("How do I add a user?", "How do I remove one?", "How do I remove a user?"),
        ("How do I add a user?", "And the second one?", "The second user?"),
        ("What are access policies?", "which one is applied first?", "Which access policy is applied first?"),
        ("What are access policies?", "and the old ones?", "The old access policies?"),
        # Was "Can I delete a user one?": the demonstrative replaced by the subject, the "one" left behind.
        ("How do I add a user?", "Can I delete that one?", "Can I delete that user?"),
        ("How do I add a user?", "What about those ones?", "What about those users?"),
    ],
)
def test_one_standing_for_a_thing_of_the_previous_question_becomes_that_thing(previous, follow_up, standalone):
    assert is_follow_up(follow_up, turn(previous))
    assert rewrite_follow_up(follow_up, previous) == standalone


@pytest.mark.parametrize(
    "question",
    ["How can one rotate the API key?", "Can I upload one PDF twice?", "How do I remove one of the API keys?"],
)
def test_one_as_a_number_or_a_person_is_no_reference(question):
    assert not is_follow_up(question, turn("How do I list the API keys?"))


def test_a_follow_up_with_one_passes_its_own_action_on_to_the_next_follow_up():
    history = resolve_history(
        [("How do I add a user?", "Run cairn user add [1]."), ("How do I remove one?", "Run cairn user rm [1].")]
    )
    assert history[-1].standalone == "How do I remove a user?"
    assert rewrite_against("Can I do it in bulk?", history) == "Can I remove a user in bulk?"


def test_a_long_question_of_many_pronouns_is_read_in_linear_time():
    """Each pronoun once scanned the words before it for an antecedent: a client's history of 50 such
    questions of 4,000 characters took chat's event loop for 6 seconds, this one about 10.
    A guard against the quadratic scan, not a speed target."""
    question = "of " * 12_000 + "the Redis " + "it " * 12_000
    long_before = "the " * 12_000 + "one or " + "it " * 12_000  # "one" and "it" with nothing named before them
    started = time.perf_counter()
    assert not is_follow_up(question, turn(SESSIONS))  # every "it" has "the Redis" before it
    assert is_follow_up(long_before, turn(SESSIONS))
    assert time.perf_counter() - started < 5


def test_a_question_of_many_it_takes_is_read_in_linear_time():
    """'It takes ... to' once read to the end of the question from every 'it takes': 20,000 of them took about
    20 seconds. A guard against the quadratic scan, not a speed target."""
    question = "it takes " * 20_000 + "the Redis index"
    started = time.perf_counter()
    assert is_follow_up(question, turn(SESSIONS))  # no "to": each "it" points back
    assert resolve_history([(SESSIONS, "In Redis [1]."), (question, "…")])[-1].standalone.endswith("the Redis index")
    assert time.perf_counter() - started < 5
