"""An upload's bytes to text: PDFs with pypdf, HTML with the standard library's parser,
everything else decoded as text.

pypdf is pure Python, well kept and reads text from PDFs without a system library
(Letta's markitdown pulls in a dozen packages for the same). HTML needs no package:
html.parser gives the text between tags, which is what an agent reads. The text is made
storable (no NUL, no lone surrogates: Postgres refuses both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from o_contracts.file_types import of_mime
from o_runtime.pdf_text import UnreadablePdf, pdf_pages


class ParseError(ValueError):
    """The file cannot be read as its type; the message says why (clients see it)."""


@dataclass(frozen=True)
class ParsedText:
    text: str
    # PDFs only.
    pages: int | None = None


def parse(data: bytes, mime_type: str) -> ParsedText:
    parser = of_mime(mime_type).parser
    if parser == "pdf":
        return _pdf(data)
    if parser == "html":
        return ParsedText(storable(html_text(_decoded(data))))
    return ParsedText(storable(_decoded(data)))


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    return _UNSTORABLE.sub("\ufffd", text.replace("\r\n", "\n").replace("\r", "\n"))


def _decoded(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ParseError(f"the file is not valid UTF-16 text: {exc}") from exc
    if b"\x00" in data:
        raise ParseError("the file is not text (it contains NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Legacy single-byte text (Windows-1252, Latin-1): every byte is a character.
        return data.decode("cp1252", errors="replace")


def _pdf(data: bytes) -> ParsedText:
    try:
        pages = pdf_pages(data)
    except UnreadablePdf as exc:
        raise ParseError(str(exc)) from exc
    return ParsedText(storable("\n\n".join(p for p in pages if p)), pages=len(pages))


# Elements whose text is not shown, and those that start a new line.
_HIDDEN = frozenset({"script", "style", "noscript", "template", "head", "svg"})
_BLOCKS = frozenset(
    {
        "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
        "footer", "nav", "aside", "main", "blockquote", "pre", "hr", "dt", "dd", "dl",
        "h1", "h2", "h3", "h4", "h5", "h6", "title", "form", "figure", "figcaption",
    }
)  # fmt: skip


_ITEMS = frozenset({"li", "tr", "dt", "dd", "br"})


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.parts.append("#" * int(tag[1]) + " ")
            elif tag == "li":
                self.parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCKS and tag not in _ITEMS:
            # A paragraph ends with a blank line; list items and rows follow each other.
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(source: str) -> str:
    """The text a reader sees: tags gone, headings marked, one line per block."""
    parser = _Text()
    parser.feed(source)
    parser.close()
    lines = (re.sub(r"[ \t\f\v]+", " ", line).strip() for line in "".join(parser.parts).split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
