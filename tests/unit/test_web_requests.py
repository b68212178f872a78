"""The web tools' pure parts: a model's arguments checked and typed, what it is given back,
and a fetched page as text (o_executor/web/)."""

from __future__ import annotations

import json

import pytest

from o_executor.web import answers
from o_executor.web.pages import NotAPage, media_type, page_text
from o_executor.web.requests import BadArguments, fetch_request, search_request
from tests.pdf_fixture import tiny_pdf


def test_a_search_takes_lettas_arguments_and_clamps_the_count() -> None:
    request = search_request(
        {
            "query": "otters",
            "num_results": 500,
            "category": "research paper",
            "include_domains": ["arxiv.org"],
            "start_published_date": "2026-01-01",
        }
    )
    assert (request.query, request.num_results, request.category) == (
        "otters",
        100,
        "research paper",
    )
    assert request.include_domains == ("arxiv.org",) and request.exclude_domains == ()
    assert search_request({"query": "x", "num_results": 0}).num_results == 1
    assert search_request({"query": "x"}).num_results == 10


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({}, "query is required"),
        ({"query": 3}, "query must be a string"),
        ({"query": "x", "num_results": "ten"}, "num_results must be a number"),
        ({"query": "x", "num_results": True}, "num_results must be a number"),
        ({"query": "x", "category": "gossip"}, "category must be one of"),
        ({"query": "x", "include_text": "yes"}, "include_text must be true or false"),
        ({"query": "x", "include_domains": "arxiv.org"}, "must be a list of strings"),
    ],
)
def test_bad_search_arguments_say_what_is_wrong(args: dict[str, object], reason: str) -> None:
    with pytest.raises(BadArguments, match=reason):
        search_request(args)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "Invalid URL scheme 'file'"),
        ("ftp://example.org/x", "Invalid URL scheme 'ftp'"),
        ("example.org/page", "Invalid URL scheme ''"),
        ("https:///nohost", "has no host"),
    ],
)
def test_only_http_pages_are_fetched(url: str, reason: str) -> None:
    with pytest.raises(BadArguments, match=reason):
        fetch_request({"url": url})
    assert fetch_request({"url": " https://example.org/a "}).url == "https://example.org/a"


def test_results_keep_lettas_fields_and_text_only_when_asked() -> None:
    found = [
        answers.Found(
            title="T", url="https://x.org", author="A", text="body", highlights=["h"], summary="s"
        )
    ]
    plain = json.loads(answers.search_results("q", found, include_text=False))
    assert plain == {
        "query": "q",
        "results": [
            {
                "title": "T",
                "url": "https://x.org",
                "published_date": None,
                "author": "A",
                "highlights": ["h"],
                "summary": "s",
            }
        ],
    }
    assert json.loads(answers.search_results("q", found, include_text=True))["results"][0][
        "text"
    ] == ("body")


def test_a_long_answer_is_cut_with_a_note() -> None:
    assert answers.clipped("short", 10) == "short"
    cut = answers.clipped("x" * 25, 10)
    assert cut == "x" * 10 + "\n\n[cut: 15 more characters not shown]"


def test_a_page_is_its_main_content_or_its_text() -> None:
    html = (
        b"<html><body><nav><a href='/'>Menu items</a></nav><article><h2>Kelp</h2>"
        b"<p>Kelp forests grow fast, up to half a metre a day in good light and cold water."
        b" They shelter otters, urchins and the fish that feed on both.</p>"
        b"<p>A forest can vanish in a warm year and come back in a cold one.</p></article>"
        b"<footer>Footer text</footer></body></html>"
    )
    text = page_text(html, "text/html; charset=utf-8")
    assert "Kelp forests grow fast" in text and "Menu items" not in text
    # No content type: markup is read as HTML, anything else as text.
    assert "Kelp forests" in page_text(html, None)
    assert page_text("café".encode("latin-1"), "text/plain; charset=ISO-8859-1") == "café"
    assert page_text(b'{"a": 1}', "application/json") == '{"a": 1}'
    assert page_text(b"odd", "text/plain; charset=no-such-charset") == "odd"
    with pytest.raises(NotAPage, match="image/png"):
        page_text(b"\x89PNG", "image/png")
    assert media_type("Text/HTML; Charset=UTF-8") == ("text/html", "UTF-8")


def test_a_pdf_is_the_text_of_its_pages() -> None:
    pdf = tiny_pdf([["Otters and kelp", "page one"], ["page two"]])
    text = page_text(pdf, "application/pdf")
    assert "Otters and kelp" in text and text.index("page one") < text.index("page two")
    assert page_text(pdf, None) == text  # (known by its first bytes)
    with pytest.raises(NotAPage, match="could not be read"):
        page_text(b"%PDF-1.7 broken", "application/pdf")
    with pytest.raises(NotAPage, match="no text to read"):
        page_text(tiny_pdf([[]]), "application/pdf")
