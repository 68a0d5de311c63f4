"""Shell words with their places in the text (pure), so that redaction can mask a value where it is written.

``shlex.split`` gives the words but not where they are: re-joining them (``shlex.join``) would print another command
than the one submitted (``"$HOME"`` becomes ``'$HOME'``, ``&&`` becomes ``'&&'``). This scanner follows the POSIX
quoting rules shlex follows (single quotes literal; backslash escapes outside quotes and, inside double quotes,
before ``$ ` " \\`` and a newline) and also splits the control operators (``;``, ``&&``, ``|``, ...) off, which
shlex.split leaves glued to a word. It refuses what shlex refuses: an unclosed quote, a trailing backslash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPERATOR = re.compile(r"[;&|]+|[<>]+&?|[()]")
_WORD_END = re.compile(r"[;&|<>)]")  # "(" starts no word inside one: "--token=$(cat t)", "f(x" stay whole
_DOUBLE_QUOTED_ESCAPES = '$`"\\\n'


@dataclass(frozen=True)
class Word:
    """One shell word: ``text`` (quotes removed), where each of its characters is (``places``), and its span."""

    text: str
    places: tuple[int, ...]
    start: int
    end: int
    operator: bool = False


class Unparsable(ValueError):
    """An unclosed quote or a trailing backslash."""


def _quoted(text: str, i: int, chars: list[str], places: list[int]) -> int:
    """Reads the quoted part starting at ``text[i]`` (a quote) into ``chars``/``places``; returns the index after it."""
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote:
        if quote == '"' and text[i] == "\\" and i + 1 < len(text) and text[i + 1] in _DOUBLE_QUOTED_ESCAPES:
            i += 1
        chars.append(text[i])
        places.append(i)
        i += 1
    if i >= len(text):
        raise Unparsable(f"no closing quotation ({quote})")
    return i + 1


def scan(text: str) -> list[Word]:
    """The words and operators of ``text``; raises Unparsable."""
    words: list[Word] = []
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif operator := _OPERATOR.match(text, i):
            span = tuple(range(i, operator.end()))
            words.append(Word(operator.group(), span, i, operator.end(), operator=True))
            i = operator.end()
        else:
            start = i
            chars: list[str] = []
            places: list[int] = []
            while i < len(text) and not text[i].isspace() and not _WORD_END.match(text, i):
                if text[i] in "'\"":
                    i = _quoted(text, i, chars, places)
                    continue
                if text[i] == "\\":
                    if i + 1 >= len(text):
                        raise Unparsable("no escaped character")
                    i += 1
                chars.append(text[i])
                places.append(i)
                i += 1
            words.append(Word("".join(chars), tuple(places), start, i))
    return words


def split_on_blanks(text: str) -> list[Word]:
    """The fallback for text that does not parse: runs of non-blank characters, quotes kept."""
    return [
        Word(m.group(), tuple(range(m.start(), m.end())), m.start(), m.end())
        for m in re.finditer(r"\S+", text)
    ]
