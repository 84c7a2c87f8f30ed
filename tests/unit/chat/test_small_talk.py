import pytest

from services.chat.small_talk import GOODBYE_REPLY, GREETING_REPLY, THANKS_REPLY, WELLBEING_REPLY, small_talk_reply

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("message", "reply"),
    [
        ("hi", GREETING_REPLY),
        ("Hello there!", GREETING_REPLY),
        ("  good morning, Cairn ", GREETING_REPLY),
        ("Thanks!", THANKS_REPLY),
        ("thank you so much", THANKS_REPLY),
        ("Bye", GOODBYE_REPLY),
        ("how are you?", WELLBEING_REPLY),
        ("How’s it going?", WELLBEING_REPLY),
        ("Hi!! 👋", GREETING_REPLY),
        ("ok_thanks", THANKS_REPLY),
    ],
)
def test_small_talk_gets_a_short_friendly_reply(message, reply):
    assert small_talk_reply(message) == reply


@pytest.mark.parametrize(
    "message",
    [
        "hi, how do I add a user?", "thanks, and what about the TTL?", "How do sessions expire?", "hello world program", "?",
        # Words of another script, or a digit, carry more than the greeting the Latin letters spell.
        "Hi, как добавить пользователя?", "Hello! 如何添加用户？", "Hey, ユーザーを追加するには？", "ok 2+2?", "hi 123",
    ],
)
def test_a_message_carrying_a_question_is_not_small_talk(message):
    assert small_talk_reply(message) is None
