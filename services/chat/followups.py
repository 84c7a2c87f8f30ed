"""Follow-up questions resolved by rule: the stand-in for an LLM rewrite when there is no model.

A question is a follow-up only when the conversation has an earlier turn, and then when it
1. opens with "what about", "how about" or "what of";
2. opens with a conjunction ("and", "also", "then", "so", "but", "or", "plus") and names at most two
   things of its own ("and for admins?");
3. uses a personal pronoun (it, its, they, them, their, he, she, ...) with no antecedent earlier in the
   question; impersonal "it" ("is it possible to ...", "how long does it take to ...") does not count;
4. uses "this", "that", "these", "those" or a locative "there", names at most two things of its own and
   has no antecedent ("a user that is disabled" and "is there a limit" are not references);
5. uses "one" or "ones" for a thing ("remove one", "the second one?", "which one is faster?"), names at most
   two things of its own and has no antecedent before its noun phrase ("one PDF", "one of the keys" and
   "can one ..." are not references);
6. names nothing of its own ("Why?", "Any examples?", "What's the default?", "Can you say more?").
Words that "name" something are those that are neither function words nor generic ones (example,
default, limit, explain, tell, ...). An antecedent is a word after "the"/"a"/"an", or a capitalised name,
before the pronoun.

A follow-up is rewritten against the previous *standalone* question, so chains keep their subject:
- "its N" / "their N" → "the N of SUBJECT": "and what about its TTL?" after "How are login sessions
  stored?" → "What about the TTL of login sessions?";
- "it", "they", "them", "this", "that" → SUBJECT: then "Can it be changed?" → "Can the TTL of login
  sessions be changed?";
- "do it" after a how-to question → its action: "Can I do it in bulk?" after "How do I add a user?" →
  "Can I add a user in bulk?";
- "one" / "ones" standing for a thing → SUBJECT, or its noun after a determiner: "How do I remove one?" →
  "How do I remove a user?", "Can I delete that one?" → "Can I delete that user?", "and the old ones?" →
  "The old users?";
- "what about the N" / "and the N" → "What about the N of SUBJECT?";
- anything else keeps its words and carries the previous topic in brackets: "Why?" → "Why? (login
  sessions stored)", which still gives BM25 and the embedding the right terms.
SUBJECT comes from a few question shapes: "What is X", "How are X stored", "How do I VERB X", "What does
X do", "What about X", "What N does X VERB" ("Which port does the gateway listen on?": the port of the
gateway); for other shapes only the bracketed topic is carried.

Limits: there is no part-of-speech tagger, so a question whose subject is not one of those shapes gets
the bracketed form; a pronoun that points at something other than the previous subject (or at an
earlier turn) is resolved wrongly; "that"/"there" in a short standalone question ("Users that are
admins?") may be taken for a reference; typos are not fixed; English only (a question in another language,
of any script, is left as typed).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from services.chat.ports import Exchange

FUNCTION_WORDS = frozenset(
    "a an the and or but so then also too plus of to in on at for from by with about into over under as than if "
    "per via between through across after before during within without against among "
    "is are was were be been being am do does did done can could should would will shall may might must have has "
    "had i me my we us our you your one it its they them their theirs he him his she her hers this that these those "
    "there here what which who whom whose when where why how not no yes any some all each every more most other "
    "else just only very really please thanks thank ok okay same ones way lot isn't aren't wasn't weren't don't "
    "doesn't didn't can't won't shouldn't couldn't wouldn't".split()
)
GENERIC_WORDS = frozenset(
    "example examples detail details default defaults limit limits maximum minimum max min alternative "
    "alternatives difference reason reasons purpose option options instead long much many often exactly mean "
    "means meaning work works happen happens "
    # asking for more of the last answer: "can you say more", "tell me more", "explain", "go on"
    "say tell explain elaborate expand clarify continue go show give know further again".split()
)
ARTICLES = frozenset({"the", "a", "an"})
CONJUNCTIONS = frozenset({"and", "also", "then", "so", "but", "or", "plus", "ok", "okay"})
PERSONAL = frozenset({"it", "its", "they", "them", "their", "theirs", "he", "him", "his", "she", "her"})
DEMONSTRATIVE = frozenset({"this", "that", "these", "those"})
PROP_ONE = frozenset({"one", "ones"})
# Words before a "one" that make it "the one of the subject" rather than the subject itself.
DETERMINERS = frozenset({"which", "this", "that", "these", "those", "each", "every", "another", "any", "my", "our", "your"})
POSSESSIVE = frozenset({"its", "their", "his", "her"})
BE = frozenset({"is", "are", "was", "were"})
MODALS = frozenset({"do", "does", "did", "can", "could", "should", "would", "will", "may", "must"})
ASKERS = frozenset({"i", "we", "you", "one"})
LIGHT_VERBS = frozenset({"do", "work", "mean", "happen", "behave", "look"})
IRREGULAR_PARTICIPLES = frozenset(
    "kept set built sent made done run held put read split found shown written chosen given taken hidden broken".split()
)
MAX_OWN_TERMS_FOR_REFERENCE = 2
MAX_SUBJECT_WORDS = 8

# Words of any script: a question in Chinese or Russian names things of its own, though no rule here reads it.
WORD = re.compile(r"\w+(?:'[^\W\d_]+)?(?:[.\-/]\w+)*")
# "It takes ... to" reads ahead no further than the next "it takes": an unbounded ".*" rescanned the rest of the
# question from every "it takes", quadratic in a crafted one, and a bound in characters missed the "to" of a long
# question. It ends before the word after "to", which stays a word of its own.
IMPERSONAL_IT = re.compile(
    r"\bit(?:'s|\s+is|\s+was|\s+be)?\s+(?:possible|safe|ok|okay|necessary|recommended|better|best|wise|"
    r"advisable|normal|worth|required|allowed|a good idea)\b|\bit\s+takes?\b(?:(?!\bit\s+takes?\b).)*?\bto\s+(?=\w)",
    re.IGNORECASE,
)
EXISTENTIAL_THERE = re.compile(r"\b(?:is|are|was|were)\s+there\b|\bthere(?:'s|\s+is|\s+are)\b", re.IGNORECASE)
ABOUT_OPENER = re.compile(r"^\s*(?:what|how)\s+(?:about|of)\b", re.IGNORECASE)
CONTRACTED = {"it's": "{} is", "that's": "{} is", "they're": "{} are"}


def is_follow_up(query: str, history: Sequence[Exchange]) -> bool:
    """True when `query` leans on the conversation so far (see the module docstring for the rules)."""
    if not history:
        return False
    words = _words(IMPERSONAL_IT.sub(" ", EXISTENTIAL_THERE.sub(" ", query)))
    bases = [_base(w) for w in words]
    own = _own_terms(bases)
    if ABOUT_OPENER.match(query) or not own:
        return True
    if bases and bases[0] in CONJUNCTIONS and len(own) <= MAX_OWN_TERMS_FOR_REFERENCE:
        return True
    antecedent = _first_antecedent(words)  # once: a scan per pronoun was quadratic in a long question
    for i, base in enumerate(bases):
        pointing = base in PERSONAL or (base in DEMONSTRATIVE | {"there"} and len(own) <= MAX_OWN_TERMS_FOR_REFERENCE)
        if pointing and antecedent >= i:
            return True
        if _stands_for_a_thing(bases, i) and len(own) <= MAX_OWN_TERMS_FOR_REFERENCE:
            if antecedent >= _noun_phrase_start(bases, i):
                return True
    return False


def _stands_for_a_thing(bases: list[str], i: int) -> bool:
    """Whether "one"/"ones" heads its own noun phrase ("remove one", "the old ones are"), not "one PDF", "one of the
    keys" or the person of "one can"."""
    if bases[i] not in PROP_ONE:
        return False
    after = bases[i + 1] if i + 1 < len(bases) else None
    return after is None or (after in FUNCTION_WORDS and after != "of" and after not in MODALS)


def _noun_phrase_start(bases: list[str], i: int) -> int:
    """Where the noun phrase ending at bases[i] starts: "the second one" is one phrase, not an antecedent."""
    start = i
    while start and bases[start - 1] not in FUNCTION_WORDS:
        start -= 1
    return start - 1 if start and bases[start - 1] in ARTICLES else start


def rewrite_follow_up(query: str, previous_standalone: str) -> str:
    """`query` made standalone with the subject of `previous_standalone` (rules in the module docstring)."""
    carried = _CARRIED_TOPIC.search(previous_standalone)
    topic = carried.group(1) if carried else topic_of(previous_standalone)
    if not topic:
        return query
    text = _drop_leading_conjunctions(query.replace("’", "'"))
    # A previous rewrite that carried its topic in brackets passes that topic on, and nothing more.
    subject, action = (None, None) if carried else subject_of(previous_standalone)
    if subject:
        rewritten = _attach_attribute(text, subject) or _substitute_reference(text, subject=subject, action=action)
        if rewritten:
            return _sentence(rewritten)
    return _sentence(f"{text} ({topic})")


_CARRIED_TOPIC = re.compile(r"\s\(([^()]+)\)\s*$")


def rewrite_against(query: str, history: Sequence[Exchange]) -> str:
    """`query`, a follow-up, made standalone against the conversation so far (see `subject_question`)."""
    return rewrite_follow_up(query, subject_question(history))


def subject_question(history: Sequence[Exchange]) -> str:
    """The standalone question a follow-up leans on: the previous one, or, when that one only carried its topic
    in brackets ("Tell me more (add a user)"), the question the topic came from, so that its subject and action
    outlive a "tell me more": "Can I do it in bulk?" then still becomes "Can I add a user in bulk?"."""
    previous = history[-1].standalone
    carried = _CARRIED_TOPIC.search(previous)
    if carried is None:
        return previous
    for turn in reversed(history[:-1]):
        if _CARRIED_TOPIC.search(turn.standalone) is None:
            # Only the question the chain started from: an older one of another topic is no subject.
            return turn.standalone if topic_of(turn.standalone) == carried.group(1) else previous
    return previous


def resolve_history(turns: Sequence[tuple[str, str]]) -> list[Exchange]:
    """Earlier (question, answer) turns a client sent, each question made standalone by these rules against the
    one before it, as a stored conversation keeps them: a chain of follow-ups then keeps its subject."""
    history: list[Exchange] = []
    for question, answer in turns:
        standalone = rewrite_against(question, history) if is_follow_up(question, history) else question
        history.append(Exchange(question=question, standalone=standalone, answer=answer))
    return history


def topic_of(question: str) -> str:
    """What a question is about: its words without the leading question frame and trailing function words."""
    words = _words(question)
    while words and _base(words[0]) in FUNCTION_WORDS:
        words.pop(0)
    while words and _base(words[-1]) in FUNCTION_WORDS:
        words.pop()
    return " ".join(words[: MAX_SUBJECT_WORDS + 4])


def subject_of(question: str) -> tuple[str | None, str | None]:
    """(the noun phrase a question is about, the action of a how-to question), from the shapes it knows."""
    words = _words(question)
    if words and words[0].lower() in {"what's", "who's", "where's", "how's"}:
        words[:1] = [words[0][:-2], "is"]
    bases = [_base(w) for w in words]
    if len(bases) >= 2 and bases[0] in {"what", "how"} and bases[1] in {"about", "of"}:
        return _phrase(words[2:]), None
    if len(bases) >= 3 and bases[0] in {"what", "which", "who"} and bases[1] in BE:
        rest = words[2:]
        return (None, None) if _is_participle(rest[0]) else (_phrase(rest), None)  # "What is stored ..."
    if len(bases) >= 3 and bases[0] in {"how", "where", "when", "why"} and bases[1] in BE:
        rest = words[2:]
        cut = next((i for i, w in enumerate(rest) if i and _is_participle(w)), len(rest))
        return _phrase(rest[:cut]), None
    start = 1 if bases and bases[0] in {"how", "where", "when", "why", "what"} else 0
    if len(bases) > start + 3 and bases[start] in MODALS and bases[start + 1] in ASKERS:
        return _phrase(words[start + 3 :]), _phrase(words[start + 2 :])
    if len(bases) > start + 2 and bases[start] in MODALS and bases[-1] in LIGHT_VERBS:
        return _phrase(words[start + 1 : -1]), None
    if (start and bases[0] != "why") or (bases and bases[0] == "which"):  # "why" asks of an event: its topic
        return _subject_before_the_verb(words, bases), None
    return None, None


def _subject_before_the_verb(words: list[str], bases: list[str]) -> str | None:
    """The subject of "What does the gateway need?" or "How often do replicas sync?": the words between the
    auxiliary and the verb that ends the question (only particles after it), with what is asked of it:
    "Which port does the gateway listen on?" → "the port of the gateway". None when a function word stands
    inside it, where the verb may have had an object ("What does the gateway use for metrics?")."""
    auxiliary = next((i for i, base in enumerate(bases[:4]) if base in MODALS), None)
    if auxiliary is None or any(base in FUNCTION_WORDS for base in bases[1:auxiliary]):
        return None
    verb = max((i for i, base in enumerate(bases) if base not in FUNCTION_WORDS), default=-1)
    if verb > auxiliary + 2 and (
        _is_name_after_a_verb(words[verb - 1], words[verb]) or _is_plural_after_do(bases[auxiliary], bases[verb])
    ):
        verb -= 1  # "What does the gateway need Redis (or sessions) for?": the verb's object, not the verb
        if bases[verb] in FUNCTION_WORDS:
            return None
    if verb <= auxiliary + 1 or any(base in FUNCTION_WORDS for base in bases[auxiliary + 2 : verb]):
        return None
    subject = words[auxiliary + 1 : verb]
    # What was asked of it comes with it ("the port of the gateway"): a follow-up's "it" may mean either.
    # Not the "long" of "how long" or the "often" of "how often".
    asked = [word for word, base in zip(words[1:auxiliary], bases[1:auxiliary]) if base not in GENERIC_WORDS]
    phrase = _phrase(subject)
    return f"the {' '.join(asked)} of {phrase}" if asked and phrase else phrase


def _is_name_after_a_verb(before: str, word: str) -> bool:
    """`word` is written as a name (Redis, RabbitMQ) after a word in lower case: a name is no verb. In a
    question written in title case every word has a capital, and nothing is told from them."""
    return word[:1].isupper() and before.islower()


def _is_plural_after_do(auxiliary: str, word: str) -> bool:
    """`word`, where the verb would stand after "do"/"does"/"did", is a plural noun: after "do" a verb takes
    its base form, and _singular leaves base forms in -s as they are ("process", "focus")."""
    return auxiliary in {"do", "does", "did"} and _singular(word) != word


def _substitute_reference(text: str, *, subject: str, action: str | None) -> str | None:
    spans = list(WORD.finditer(text))
    bases = [_base(span.group()) for span in spans]
    for i, match in enumerate(spans):
        base = match.group().lower()
        after = spans[i + 1].group() if i + 1 < len(spans) else ""
        if base in PROP_ONE and _stands_for_a_thing(bases, i):
            return f"{text[: match.start()]}{_in_place_of_one(bases, i, subject)}{text[match.end() :]}"
        if base in DEMONSTRATIVE and _base(after) in PROP_ONE:
            continue  # "that one": the determiner of the "one" that stands for the subject
        if IMPERSONAL_IT.match(text, match.start()) or not (base in PERSONAL | DEMONSTRATIVE or base in CONTRACTED):
            continue
        if base in POSSESSIVE and after and _base(after) not in FUNCTION_WORDS:
            end = _noun_end(spans, i + 1)
            noun = text[spans[i + 1].start() : spans[end].end()]
            return f"{text[: match.start()]}the {noun} of {subject}{text[spans[end].end() :]}"
        if base in DEMONSTRATIVE and after and _base(after) not in FUNCTION_WORDS:
            return None  # "those files": a determiner, not a stand-in for the subject
        if action and base in {"it", "this", "that"} and i and spans[i - 1].group().lower() == "do":
            return f"{text[: spans[i - 1].start()]}{action}{text[match.end() :]}"
        replacement = CONTRACTED.get(base, "{}").format(subject)
        return f"{text[: match.start()]}{replacement}{text[match.end() :]}"
    return None


def _in_place_of_one(bases: list[str], i: int, subject: str) -> str:
    """What the "one" (or "ones") at bases[i] stands for: `subject` ("remove one" → "remove a user"; of plural
    things, "remove one API key"), or its noun alone after a determiner ("the old ones" → "the old users",
    "which one" → "which user")."""
    start = _noun_phrase_start(bases, i)
    determined = bases[start] in ARTICLES or (start > 0 and bases[start - 1] in DETERMINERS)
    words = subject.split()
    if len(words) > 1 and words[0].lower() in ARTICLES:
        words = words[1:]
    singular = [*words[:-1], _singular(words[-1])]
    if not determined:  # "remove one" of "the API keys" → "remove one API key"; of "a user" → "remove a user"
        return f"one {' '.join(singular)}" if bases[i] == "one" and singular != words else subject
    return " ".join([*words[:-1], _plural(words[-1])] if bases[i] == "ones" else singular)


def _singular(noun: str) -> str:
    """A rough English singular, for a search query: "keys" → "key", "policies" → "policy"; "status" stays.
    Not inflect's singular_noun, which makes "Redis" "Redi" and "analysis" "analysi": names of software and
    words in -is, -us are common in the questions this serves."""
    lower = noun.lower()
    if lower.endswith("ies") and len(lower) > 4:
        return noun[:-3] + "y"
    if lower.endswith(("sses", "xes", "ches", "shes")):
        return noun[:-2]
    if lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
        return noun[:-1]
    return noun


def _plural(noun: str) -> str:
    """A rough English plural, for a search query: "user" → "users", "policy" → "policies"."""
    lower = noun.lower()
    if lower != _singular(noun).lower() or lower.endswith(("ss", "us", "is")):
        return noun  # already plural, or a word such as "status" best left as it is
    if lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if lower.endswith(("x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def _attach_attribute(text: str, subject: str) -> str | None:
    """Turns "what about the TTL?", "the TTL?" or "its TTL?" into "What about the TTL of SUBJECT?"."""
    words = _words(ABOUT_OPENER.sub("", text))
    if len(words) < 2 or words[0].lower() not in ARTICLES | POSSESSIVE:
        return None
    if any(_base(w) in FUNCTION_WORDS for w in words[1:]):
        return None
    return f"What about the {' '.join(words[1:])} of {subject}{'?' if text.rstrip().endswith('?') else ''}"


def _noun_end(spans: list[re.Match[str]], start: int) -> int:
    end = start
    while end + 1 < len(spans) and end - start < 2 and _base(spans[end + 1].group()) not in FUNCTION_WORDS:
        end += 1
    return end


def _phrase(words: list[str]) -> str | None:
    words = list(words)
    while words and _base(words[0]) in FUNCTION_WORDS - ARTICLES - {"my", "our", "your"}:
        words.pop(0)
    while words and _base(words[-1]) in FUNCTION_WORDS:
        words.pop()
    return " ".join(words[:MAX_SUBJECT_WORDS]) or None


def _first_antecedent(words: list[str]) -> int:
    """Where the first antecedent stands (len(words) when none does): a pronoun at i has one when this is < i."""
    for i, word in enumerate(words):
        if _base(word) in FUNCTION_WORDS:
            continue
        if (i and words[i - 1].lower() in ARTICLES) or (i and word[0].isupper()):
            return i
    return len(words)


def _is_participle(word: str) -> bool:
    lower = word.lower()
    return (len(lower) > 4 and lower.endswith("ed") and not lower.endswith("eed")) or lower in IRREGULAR_PARTICIPLES


def _drop_leading_conjunctions(query: str) -> str:
    # With the punctuation that ends the word ("Okay. Can I ...", "And... what about ..."), not the rest.
    opener = rf"^(?:\s*(?:{'|'.join(CONJUNCTIONS)})\b(?:[.;:!…]+(?=\s|$))?[\s,]*)+"
    return re.sub(opener, "", query, flags=re.IGNORECASE).strip() or query


def _own_terms(bases: list[str]) -> list[str]:
    return [b for b in bases if b not in FUNCTION_WORDS and b not in GENERIC_WORDS]


def _base(word: str) -> str:
    lower = word.lower()
    if lower in FUNCTION_WORDS or "'" not in lower:
        return lower
    head, _, tail = lower.partition("'")
    return head if tail in {"s", "re", "ll", "ve", "d", "m"} else lower


def _words(text: str) -> list[str]:
    return WORD.findall(text.replace("’", "'"))


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:]
