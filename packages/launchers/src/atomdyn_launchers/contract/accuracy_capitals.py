"""The ``capitals`` accuracy task's rules: a country's capital asked as a plain question, its answer found in the
response's first line. A task a small model can do, so that its score can be gated by an absolute floor (GSM8K's
rules are :mod:`atomdyn_launchers.contract.accuracy`'s; the registry of tasks is
:mod:`atomdyn_launchers.profiles.accuracy_tasks`).

- The prompt is ``What is the capital of {country}?``, sent as one user message of a chat completion. With
  few-shot examples (``few_shot`` > 0) each example is ``Question: What is the capital of {country}?\\nAnswer:
  {capital}``, the examples joined by ``"\\n\\n"`` and followed by ``"\\n\\n"``, and the asked item is
  ``Question: What is the capital of {country}?\\nAnswer:``. SmolLM2-135M-Instruct answers the plain question
  far better than after examples (docs/recipes.md, "Accuracy"), so the rehearsal asks it zero-shot.
- Generation is greedy until a newline (``"\\n"``) or a chat end token (``"</s>"``, ``"<|im_end|>"``,
  ``"<|endoftext|>"``): the answer is one line.
- One filter, ``first-line``: the response up to its first newline, whitespace at both ends stripped (the stop
  sequence already ends the response there; an engine that ignores it is cut here).
- ``fold``: Unicode NFKD decomposition with the combining marks dropped (accents folded: ``Bogotá`` is
  ``bogota``), case folded (``str.casefold``), every run of whitespace made one space, both ends stripped.
- Correct: the folded capital occurs in the folded first line as whole words, that is not preceded and not
  followed by a letter, a digit or an underscore (``Paris`` in ``The capital of France is Paris.``, not in
  ``Parisville``). A line naming several cities counts if one of them is the capital; the scorer does not try
  to read refusals or hedges.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

TASK = "capitals"
FIRST_LINE = "first-line"
FILTERS = (FIRST_LINE,)
GATED_FILTER = FIRST_LINE
STOP: tuple[str, ...] = ("\n", "</s>", "<|im_end|>", "<|endoftext|>")
FALLBACK = "[invalid]"
_SPACES = re.compile(r"\s+")


def fold(text: str) -> str:
    """Accents folded, case folded, whitespace runs made one space, both ends stripped."""
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _SPACES.sub(" ", bare.casefold()).strip()


def question(country: str) -> str:
    return f"What is the capital of {country}?"


def prompt(country: str, shots: Iterable[tuple[str, str]] = ()) -> str:
    """The plain question, or with ``(country, capital)`` examples before it in the Question/Answer form."""
    examples = "".join(f"Question: {question(c)}\nAnswer: {a}\n\n" for c, a in shots)
    if not examples:
        return question(country)
    return f"{examples}Question: {question(country)}\nAnswer:"


def extract(response: str, name: str) -> str:
    """The answer filter ``name`` (``first-line``) takes out of ``response``."""
    if name != FIRST_LINE:
        raise ValueError(f"unknown filter {name!r} (known: {', '.join(FILTERS)})")
    line = response.split("\n", 1)[0].strip()
    return line or FALLBACK


def target(capital: str) -> str:
    """The capital as it is compared (folded)."""
    return fold(capital)


def exact_match(extracted: str, capital: str) -> bool:
    """Whether the folded capital occurs in the folded extracted line as whole words."""
    wanted = target(capital)
    if not wanted or extracted == FALLBACK:
        return False
    return re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", fold(extracted)) is not None
