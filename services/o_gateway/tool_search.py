"""Tools ranked by a query's words (BM25 over name, description and tags).

Letta searches tools through Turbopuffer embeddings, and a server without it
answers 400. O ranks its few dozen tools by words instead, in every search mode:
a tool's name and description are written to be found by the words a person
would use, and ranking them needs no embedding model in the gateway.
`fts_rank` is a tool's place in that ranking; `vector_rank` is never set.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")
# BM25's usual constants: term-frequency saturation and length normalisation.
K1 = 1.2
B = 0.75
# Words that say nothing of what a tool does: "the weather" must not find every tool
# whose description has "the".
STOP_WORDS = frozenset(
    "a an and are as at be by for from how i in is it me my of on or that the this to"
    " what when where which with you your".split()
)


def words(text: str) -> list[str]:
    # `get_weather` and `getWeather` both read as "get weather".
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ")
    return _WORD.findall(spaced.lower())


def _document(tool: dict[str, Any]) -> list[str]:
    # The name counts twice: it is the shortest description of what a tool does.
    name = words(tool["name"])
    tags = " ".join(tool.get("tags") or [])
    return name + name + words(tool.get("description") or "") + words(tags)


def ranked(tools: list[dict[str, Any]], query: str) -> list[tuple[dict[str, Any], float]]:
    """The tools that share a word with `query`, best first, with their scores."""
    terms = set(words(query)) - STOP_WORDS
    if not terms:
        return []
    docs = [Counter(_document(t)) for t in tools]
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(lengths) if lengths else 0.0
    n = len(docs)
    frequency = {term: sum(1 for d in docs if term in d) for term in terms}
    scored = []
    for tool, doc, length in zip(tools, docs, lengths, strict=True):
        score = 0.0
        for term in terms:
            tf = doc.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / (average or 1)))
        if score > 0:
            scored.append((tool, score))
    return sorted(scored, key=lambda item: -item[1])
