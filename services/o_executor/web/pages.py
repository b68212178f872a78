"""A fetched page as text for the model. Pure: no I/O.

HTML goes through trafilatura, which keeps a page's main content (no menus, footers or
cookie banners) as markdown; a page it finds no main content in is given as all of its
text instead. A PDF gives the text of its pages (pypdf), one after the other. Other text
(plain, markdown, JSON, XML, CSS ...) is given as it is. Anything else (images, archives)
is refused with its type.
"""

from __future__ import annotations

from email.message import Message

from o_runtime.pdf_text import UnreadablePdf, pdf_pages

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/javascript"})


class NotAPage(ValueError):
    """The answer is of a kind O does not read as text."""


def media_type(content_type: str | None) -> tuple[str, str | None]:
    """The media type (lower case) and charset of a Content-Type header."""
    if not content_type:
        return "", None
    header = Message()
    header["content-type"] = content_type
    charset = header.get_param("charset")
    return header.get_content_type().lower(), charset if isinstance(charset, str) else None


def page_text(body: bytes, content_type: str | None) -> str:
    """The text the model is given of a page of this type (NotAPage if it is none)."""
    kind, charset = media_type(content_type)
    if kind in HTML_TYPES or (not kind and body.lstrip()[:1] == b"<"):
        return _html_text(body)
    if kind == "application/pdf" or (not kind and body.startswith(b"%PDF-")):
        return _pdf_text(body)
    if kind in TEXT_TYPES or kind.startswith("text/") or not kind:
        return _decoded(body, charset)
    raise NotAPage(f"the address answered with {kind}, not a web page or text")


def _html_text(body: bytes) -> str:
    # (Imported here: lxml and its friends load when a page is first read, not at start.)
    import trafilatura

    markdown = trafilatura.extract(
        body, output_format="markdown", include_links=True, include_tables=True
    )
    if markdown:
        return str(markdown)
    return str(trafilatura.html2txt(body))


def _pdf_text(body: bytes) -> str:
    try:
        pages = pdf_pages(body)
    except UnreadablePdf as exc:
        raise NotAPage(str(exc)) from exc
    text = "\n\n".join(p for p in pages if p)
    if not text:
        raise NotAPage("the PDF has no text to read (a scan, without a text layer?)")
    return text


def _decoded(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")
