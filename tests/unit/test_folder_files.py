"""Folders' files without infrastructure: parsing, chunking, the agent's line views, the
open/close decisions, the prompt's directories and the file tools' answers."""

from __future__ import annotations

import re

import pytest

from o_contracts.directories import TRUNCATED_WARNING, file_limits, render_directories, shown
from o_contracts.file_commands import FileOpenRequest
from o_contracts.file_types import file_type
from o_memory.files.chunking import chunk_ends, spans, target_chars
from o_memory.files.lines import BadWindow, units, visible_content, window
from o_memory.files.parsing import ParseError, parse
from o_memory.files.processing import FileState, batch_indices
from o_memory.files.search import (
    Match,
    Passage,
    grep_lines,
    grep_report,
    include_regex,
    prefilter,
    semantic_report,
)
from o_memory.files.views import AgentFile, OpenView, Refused, open_bulk, open_strict
from tests.pdf_fixture import tiny_pdf

# -- types and parsing ---------------------------------------------------------------


def test_an_upload_is_typed_by_its_content_type_or_else_by_its_name() -> None:
    assert file_type("notes.md", "text/markdown").mime_type == "text/markdown"  # type: ignore[union-attr]
    # Clients often send octet-stream or text/plain: the name decides.
    assert file_type("main.py", "application/octet-stream").mime_type == "text/x-python"  # type: ignore[union-attr]
    assert file_type("main.py", "text/plain").view == "code"  # type: ignore[union-attr]
    assert file_type("report.PDF", None).parser == "pdf"  # type: ignore[union-attr]
    assert file_type("photo.png", "image/png") is None
    assert file_type("archive.zip", None) is None


def test_a_pdf_gives_its_pages_text_in_order() -> None:
    pdf = tiny_pdf([["Quarterly report (draft)", "Revenue grew."], ["The vault code is ZX-9."]])
    parsed = parse(pdf, "application/pdf")
    assert parsed.pages == 2
    assert parsed.text == "Quarterly report (draft)\nRevenue grew.\n\nThe vault code is ZX-9."


def test_a_broken_pdf_is_a_parse_error_saying_so() -> None:
    with pytest.raises(ParseError, match="the PDF could not be read"):
        parse(b"%PDF-1.4\nnot really a pdf", "application/pdf")


def test_html_becomes_the_text_a_reader_sees() -> None:
    page = (
        b"<html><head><title>T</title><style>h1{color:red}</style></head><body>"
        b"<h2>Intro</h2><p>A <b>bold</b> claim.</p><ul><li>one</li><li>two</li></ul>"
        b"<script>alert(1)</script><p>x<br>y</p></body></html>"
    )
    assert parse(page, "text/html").text == "## Intro\n\nA bold claim.\n\n- one\n- two\n\nx\ny"


def test_text_is_decoded_and_made_storable() -> None:
    assert parse("\ufeffcafé\r\nline".encode(), "text/plain").text == "café\nline"
    # Not UTF-8: read as Windows-1252 rather than refused.
    assert parse("naïve".encode("cp1252"), "text/plain").text == "naïve"
    with pytest.raises(ParseError, match="NUL"):
        parse(b"\x00\x01binary", "text/plain")


# -- chunking ------------------------------------------------------------------------


def test_chunks_are_spans_that_join_into_the_text_and_end_at_blank_lines() -> None:
    sections = ["A" * 900 + ".", "B" * 900 + ".", "C" * 900 + "."]
    text = "\n\n".join(sections) + "\n"
    ends = chunk_ends(text, target_chars(300))
    pieces = spans(text, ends)
    assert "".join(pieces) == text
    assert [p.strip() for p in pieces] == sections


def test_a_chunk_never_passes_its_target_and_blank_ones_join_a_neighbour() -> None:
    text = "word " * 1000 + "\n" + " " * 3000 + "last words"
    ends = chunk_ends(text, 400)
    pieces = spans(text, ends)
    assert "".join(pieces) == text
    assert all(p.strip() for p in pieces)
    assert all(len(p) <= 400 for p in pieces[:-2])
    assert chunk_ends("   \n\n  ", 400) == []


def test_target_chars_follow_the_folders_chunk_size_in_tokens() -> None:
    assert target_chars(None) == 1200
    assert target_chars(100) == 400
    assert target_chars(10**6) == 8000


def test_a_batch_stops_at_its_size_in_bytes() -> None:
    state = FileState(
        "file-1",
        "source-1",
        "embedding",
        "text/plain",
        "x",
        3,
        {},
        total_chunks=5,
        chunks_embedded=1,
    )
    assert batch_indices(state, [10] * 5, 2) == range(1, 3)
    assert batch_indices(state, [10] * 5, 32) == range(1, 5)
    # One huge chunk still goes alone.
    assert batch_indices(state, [10, 200_000, 200_000, 10, 10], 32) == range(1, 2)


# -- what the agent sees of a file ---------------------------------------------------


def test_prose_is_shown_a_sentence_a_line_and_code_keeps_its_indentation() -> None:
    assert units("Hello world. This is it.\n\nNext one! yes, it is.", "sentences") == [
        "Hello world.",
        "This is it.",
        "Next one! yes, it is.",
    ]
    assert units("def f():\n\n    return 1  \n", "code") == ["def f():", "    return 1"]
    assert units("  a,b \n\n c,d", "lines") == ["a,b", "c,d"]


def test_a_window_is_numbered_under_a_header_saying_which_lines() -> None:
    lines = ["one", "two", "three", "four"]
    assert window(lines, "f.txt", "lines") == [
        "[Viewing file start (out of 4 lines)]",
        "1: one",
        "2: two",
        "3: three",
        "4: four",
    ]
    assert window(lines, "f.txt", "lines", 1, 3) == [
        "[Viewing lines 2 to 3 (out of 4 lines)]",
        "2: two",
        "3: three",
    ]
    assert window(lines, "f.txt", "lines", 2, 99)[0] == "[Viewing lines 3 to 4 (out of 4 lines)]"
    assert window(lines, "f.txt", "lines", 2)[0] == "[Viewing lines 3 to end (out of 4 lines)]"
    with pytest.raises(BadWindow, match="has only 4 lines, but requested offset 5"):
        window(lines, "f.txt", "lines", 4)
    assert visible_content("a\nb\nc", "f.txt", "lines", 2, 3) == (
        "[Viewing lines 2 to 3 (out of 3 lines)]\n2: b\n3: c"
    )


# -- opening and closing -------------------------------------------------------------


def _files(*names: str) -> list[AgentFile]:
    return [
        AgentFile(f"file-{n}", f"docs/{n}", "source-1", "completed", "lines", "l1\nl2\nl3\nl4")
        for n in names
    ]


def test_opening_past_the_limit_closes_the_least_recently_opened() -> None:
    files = _files("a.txt", "b.txt", "c.txt")
    views = [OpenView("file-a.txt", "docs/a.txt"), OpenView("file-b.txt", "docs/b.txt")]
    decision = open_strict([FileOpenRequest(file_name="docs/c.txt")], False, files, views, 2)
    assert [v.file_id for v in decision.opened] == ["file-c.txt"]
    assert [v.file_name for v in decision.closed] == ["docs/a.txt"]
    assert decision.summary == (
        "* Opened docs/c.txt\nNote: Closed 1 least recently used file(s) due to open file"
        " limit: docs/a.txt"
    )


def test_a_window_moved_says_where_it_was_and_close_all_others_says_what_it_closed() -> None:
    files = _files("a.txt", "b.txt")
    views = [OpenView("file-a.txt", "docs/a.txt", 1, 2), OpenView("file-b.txt", "docs/b.txt")]
    decision = open_strict(
        [FileOpenRequest(file_name="docs/a.txt", offset=1, length=2)], True, files, views, 5
    )
    (view,) = decision.opened
    assert (view.start_line, view.end_line) == (2, 3)
    assert decision.summary == (
        "* Opened docs/a.txt (lines 2-3) (previously lines 1-2)\nNote: Closed 1 file(s) due to"
        " close_all_others=True: docs/b.txt"
    )


def test_a_strict_open_is_refused_whole_when_one_request_is_wrong() -> None:
    files = _files("a.txt")
    with pytest.raises(Refused, match=re.escape("nope.txt not attached - did you get the")):
        open_strict([FileOpenRequest(file_name="nope.txt")], False, files, [], 5)
    with pytest.raises(Refused, match="has only 4 lines, but requested offset 11"):
        open_strict([FileOpenRequest(file_name="docs/a.txt", offset=10)], False, files, [], 5)
    with pytest.raises(Refused, match="Cannot open 2 files: exceeds configured maximum limit of 1"):
        open_strict(
            [FileOpenRequest(file_name="docs/a.txt"), FileOpenRequest(file_name="docs/a.txt")],
            False,
            files,
            [],
            1,
        )
    pending = [AgentFile("file-p", "docs/p.md", "source-1", "embedding", "sentences")]
    with pytest.raises(Refused, match="still being processed"):
        open_strict([FileOpenRequest(file_name="docs/p.md")], False, pending, [], 5)


def test_a_bulk_open_puts_the_new_files_first_and_keeps_the_newest_others() -> None:
    files = _files("a", "b", "c", "d")
    views = [OpenView("file-x", "docs/x"), OpenView("file-y", "docs/y")]
    decision = open_bulk(files[:2], views, 3)
    assert [v.file_id for v in decision.opened] == ["file-a", "file-b"]
    assert [v.file_id for v in decision.closed] == ["file-x"]
    # More new files than room: the first ones open, every other file closes.
    decision = open_bulk(files, views, 3)
    assert [v.file_id for v in decision.opened] == ["file-a", "file-b", "file-c"]
    assert [v.file_id for v in decision.closed] == ["file-x", "file-y"]


# -- the prompt ----------------------------------------------------------------------


def test_directories_show_open_files_with_their_window_and_closed_ones_without() -> None:
    rendered = render_directories(
        [
            {
                "name": "docs",
                "description": "Team docs",
                "instructions": "Cite file names.",
                "files": [
                    {"name": "docs/a.md", "open": True, "visible": "[Viewing...]\n1: Hi."},
                    {"name": "docs/b.md", "open": False, "visible": None},
                ],
            }
        ],
        max_files_open=5,
        char_limit=100,
    )
    assert rendered == (
        "<directories>\n<file_limits>\n- current_files_open=1\n- max_files_open=5\n"
        '</file_limits>\n<directory name="docs">\n<description>Team docs</description>\n'
        "<instructions>Cite file names.</instructions>\n"
        '<file status="open" name="docs/a.md">\n<metadata>\n- read_only=true\n'
        "- chars_current=19\n- chars_limit=100\n</metadata>\n<value>\n[Viewing...]\n1: Hi.\n"
        '</value>\n</file>\n<file status="closed" name="docs/b.md">\n<metadata>\n'
        "- read_only=true\n- chars_current=0\n- chars_limit=100\n</metadata>\n</file>\n"
        "</directory>\n</directories>"
    )
    assert render_directories([], 5, 100) == ""


def test_a_window_longer_than_the_limit_is_cut_with_a_warning() -> None:
    cut = shown("x" * 500, 200)
    assert len(cut) == 200 and cut.endswith(TRUNCATED_WARNING)
    assert file_limits(None) == (5, 50_000)
    assert file_limits(128_000) == (10, 25_000)
    assert file_limits(8_000) == (3, 5_000)


# -- the file tools' answers ---------------------------------------------------------


def test_grep_shows_each_match_with_its_context_lines() -> None:
    lines = ["1: alpha", "2: beta TODO", "3: gamma", "4: todo again"]
    found = grep_lines("docs/a.md", lines, re.compile("todo", re.I), 1, 10)
    assert [(m.line, m.context) for m in found] == [
        (2, ["  1: alpha", "> 2: beta TODO", "  3: gamma"]),
        (4, ["  3: gamma", "> 4: todo again"]),
    ]


def test_grep_answers_in_pages_of_twenty() -> None:
    matches = [Match("docs/a.md", n, [f"> {n}: x"]) for n in range(1, 31)] + [
        Match("docs/b.md", 1, ["> 1: x"])
    ]
    first = grep_report("x", None, matches, 0)
    assert first.startswith(
        "Found 31 total matches across 2 files (showing matches 1-20 of 31)\n" + "=" * 80
    )
    assert "  - docs/a.md: 30 matches\n  - docs/b.md: 1 matches" in first
    assert first.endswith('To see more matches, call: grep_files(pattern="x", offset=20)')
    last = grep_report("x", None, matches, 20)
    assert "(showing matches 21-31 of 31)" in last and last.endswith("No more matches to show.")
    assert (
        grep_report("zzz", "*.md", [], 0)
        == "No matches found for pattern: 'zzz' in files matching '*.md'"
    )


def test_include_takes_globs_and_postgres_narrows_only_plain_patterns() -> None:
    assert include_regex("*.md").search("docs/a.md")
    assert not include_regex("*.md").search("docs/a.md.txt")
    assert include_regex("notes").search("docs/notes.txt")
    assert prefilter("vault code") == "vault code"
    assert prefilter(r"\bcode\b") is None
    assert prefilter("^TODO") is None


def test_semantic_results_are_grouped_by_file() -> None:
    text = semantic_report(
        "vault",
        [
            Passage("docs/a.md", "The vault code\nis ZX-9.", 0.9),
            Passage("docs/b.md", "Vaults are safe.", 0.5),
            Passage("docs/a.md", "Another vault line.", 0.4),
        ],
    )
    summary = "Found 3 semantic matches in 2 files for query: 'vault'"
    assert text == "\n".join(
        [
            summary,
            "=" * len(summary),
            "\n=== docs/a.md (passage #1) ===\n  The vault code\n  is ZX-9.",
            "\n=== docs/a.md (passage #2) ===\n  Another vault line.",
            "\n=== docs/b.md (passage #3) ===\n  Vaults are safe.",
        ]
    )
    assert semantic_report("x", []) == "No semantic matches found for query: 'x'"
