"""The files a folder accepts: by extension or MIME type, how each is parsed and how an
agent sees its lines.

The gateway refuses anything else at upload (415, as Letta does); the memory service
picks the parser and the line view from here. The set is Letta's (its file-type
registry): PDF, plain text and markdown, JSON, CSV, HTML, XML, configuration files and
source code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

# How the file's text is shown to the agent, one numbered line each: sentences for
# prose (markdown), lines with their indentation for code, trimmed lines otherwise.
ViewStrategy = Literal["sentences", "code", "lines"]
# How the bytes become text.
Parser = Literal["text", "pdf", "html"]


@dataclass(frozen=True)
class FileType:
    extension: str
    mime_type: str
    parser: Parser
    view: ViewStrategy


def _types() -> list[FileType]:
    out = [
        FileType(".pdf", "application/pdf", "pdf", "lines"),
        FileType(".txt", "text/plain", "text", "lines"),
        FileType(".md", "text/markdown", "text", "sentences"),
        FileType(".markdown", "text/markdown", "text", "sentences"),
        FileType(".json", "application/json", "text", "lines"),
        FileType(".jsonl", "application/jsonl", "text", "lines"),
        FileType(".csv", "text/csv", "text", "lines"),
        FileType(".html", "text/html", "html", "code"),
        FileType(".htm", "text/html", "html", "code"),
    ]
    structured = {
        ".css": "text/css",
        ".scss": "text/x-scss",
        ".sass": "text/x-sass",
        ".less": "text/x-less",
        ".xml": "application/xml",
        ".yaml": "text/x-yaml",
        ".yml": "text/x-yaml",
        ".toml": "application/toml",
        ".ini": "text/x-ini",
        ".cfg": "text/x-conf",
        ".conf": "text/x-conf",
    }
    code = {
        ".py": "text/x-python",
        ".js": "text/javascript",
        ".ts": "text/x-typescript",
        ".java": "text/x-java-source",
        ".cpp": "text/x-c++",
        ".cxx": "text/x-c++",
        ".c": "text/x-c",
        ".h": "text/x-c",
        ".cs": "text/x-csharp",
        ".php": "text/x-php",
        ".rb": "text/x-ruby",
        ".go": "text/x-go",
        ".rs": "text/x-rust",
        ".swift": "text/x-swift",
        ".kt": "text/x-kotlin",
        ".scala": "text/x-scala",
        ".r": "text/x-r",
        ".m": "text/x-objective-c",
        ".vue": "text/x-vue",
        ".jsx": "text/x-jsx",
        ".tsx": "text/x-tsx",
        ".sh": "text/x-shellscript",
        ".bash": "text/x-shellscript",
        ".ps1": "text/x-powershell",
        ".bat": "text/x-batch",
        ".cmd": "text/x-batch",
        ".dockerfile": "text/x-dockerfile",
        ".sql": "text/x-sql",
    }
    out += [FileType(ext, mime, "text", "lines") for ext, mime in structured.items()]
    out += [FileType(ext, mime, "text", "code") for ext, mime in code.items()]
    return out


BY_EXTENSION: dict[str, FileType] = {t.extension: t for t in _types()}
# The first extension registered for a MIME type stands for it.
BY_MIME: dict[str, FileType] = {}
for _t in BY_EXTENSION.values():
    BY_MIME.setdefault(_t.mime_type, _t)
# Other names clients send for the same types.
BY_MIME.update(
    {
        "text/x-markdown": BY_EXTENSION[".md"],
        "application/x-jsonlines": BY_EXTENSION[".jsonl"],
        "text/xml": BY_EXTENSION[".xml"],
        "application/x-yaml": BY_EXTENSION[".yaml"],
    }
)
SUPPORTED = "PDF, text files (.txt, .md), JSON, CSV, HTML, and code files (.py, .js, .java, etc.)"


def file_type(file_name: str | None, content_type: str | None) -> FileType | None:
    """The type of an upload: by its Content-Type when that names one O accepts, else by
    the name's extension (clients often send application/octet-stream); None if neither."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in BY_MIME and media not in ("text/plain", "application/octet-stream"):
        return BY_MIME[media]
    ext = PurePosixPath(file_name or "").suffix.lower()
    if ext in BY_EXTENSION:
        return BY_EXTENSION[ext]
    if not ext and PurePosixPath(file_name or "").name.lower() == "dockerfile":
        return BY_EXTENSION[".dockerfile"]
    return BY_MIME.get(media)


def of_mime(mime_type: str) -> FileType:
    """A recorded file's type (its mime_type was accepted at upload)."""
    return BY_MIME.get(mime_type, BY_EXTENSION[".txt"])
