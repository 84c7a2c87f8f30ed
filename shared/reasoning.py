"""The reasoning an open model writes before its answer, taken out wherever a model's text is used."""
from __future__ import annotations

import re

__all__ = ["without_reasoning"]

# What open models served by vLLM, Ollama or llama.cpp write before their answer when no reasoning parser
# takes it out: a <think> block, one left open by a cut-off answer, or only its end on a line of its own
# (the chat template wrote the opening tag into the prompt).
_REASONING_TAGS = "think|thinking|reasoning"
_LEADING_REASONING = re.compile(
    rf"""\A(?: <({_REASONING_TAGS})> .*? (?:</\1>|\Z)
             | (?:(?!<(?:{_REASONING_TAGS})>).)*? (?:^|\n)[ \t]*</(?:{_REASONING_TAGS})>[ \t]*(?:\n|\Z) )""",
    re.DOTALL | re.IGNORECASE | re.VERBOSE,
)


def without_reasoning(text: str) -> str:
    """The model's text without the reasoning it wrote before its answer."""
    # Leading blanks are cut before matching, not by the pattern: a "\s*" there backtracked over them, each
    # step scanning the rest of the text, so a model's run of blank lines took seconds.
    return _LEADING_REASONING.sub("", text.lstrip(), count=1).strip()
