"""A PDF's text, page by page (pypdf: pure Python, well kept, no system library).

One reader for the memory service's uploads (o_memory/files/parsing.py) and
fetch_webpage (o_executor/web/pages.py); each says in its own words what it could not read.
"""

from __future__ import annotations

import io


class UnreadablePdf(ValueError):
    """The bytes are no PDF pypdf can read; the message says why."""


def pdf_pages(data: bytes) -> list[str]:
    """Each page's text, stripped (an empty string for a page without text)."""
    # (Imported here: pypdf loads when a PDF is first read, not when a service starts.)
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadablePdf("the PDF is encrypted with a password")
        return [(page.extract_text() or "").strip() for page in reader.pages]
    except UnreadablePdf:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # pypdf meets malformed files with its own errors and with plain ones.
        raise UnreadablePdf(f"the PDF could not be read: {exc}") from exc
