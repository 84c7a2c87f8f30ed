"""Greetings, thanks and goodbyes: answered at once, without retrieval or the model.

Only a message that is small talk and nothing else qualifies ("hi", "thanks a lot!", "good morning");
"hi, how do I add a user?" carries a question and goes through the pipeline.
"""
from __future__ import annotations

import re

GREETING_REPLY = "Hello! Ask me anything about the documents, and I'll answer with citations."
THANKS_REPLY = "You're welcome! Ask another question whenever you like."
GOODBYE_REPLY = "Goodbye! Come back with more questions any time."
WELLBEING_REPLY = "I'm doing well, thanks for asking. What would you like to know from the documents?"

_GREETINGS = {
    "hi", "hello", "hey", "hiya", "howdy", "greetings", "yo", "good morning", "good afternoon", "good evening",
    "hi there", "hello there", "hey there",
}
_THANKS = {
    "thanks", "thank you", "thx", "ty", "cheers", "many thanks", "thanks a lot", "thank you very much",
    "thanks so much", "thank you so much", "great thanks", "ok thanks", "perfect thanks", "great", "perfect",
    "awesome", "nice", "cool", "ok", "okay",
}
_GOODBYES = {"bye", "goodbye", "bye bye", "see you", "see you later", "good night", "later"}
_WELLBEING = {"how are you", "how are you doing", "how is it going", "how's it going", "what's up", "whats up"}
_FILLERS = re.compile(r"\b(cairn|bot|assistant|there|again)\b")
_PUNCTUATION = re.compile(r"[^\w']+|_")  # \w: letters and digits of every script
_SMALL_TALK_CHARACTERS = re.compile(r"[a-z' ]+")


def _normalised(message: str) -> str:
    text = _PUNCTUATION.sub(" ", message.lower().replace("’", "'"))
    return " ".join(text.split())


def small_talk_reply(message: str) -> str | None:
    """The reply to `message` when it is only small talk, else None."""
    text = _normalised(message)
    # A digit or a word in another script means more than small talk ("hi, как добавить пользователя?").
    if not text or len(text) > 40 or not _SMALL_TALK_CHARACTERS.fullmatch(text):
        return None
    bare = " ".join(_FILLERS.sub(" ", text).split())
    for phrases, reply in (
        (_GREETINGS, GREETING_REPLY),
        (_WELLBEING, WELLBEING_REPLY),
        (_THANKS, THANKS_REPLY),
        (_GOODBYES, GOODBYE_REPLY),
    ):
        if text in phrases or bare in phrases:
            return reply
    return None
