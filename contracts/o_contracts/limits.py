"""What a value must be to be recorded: the limits every input is held to, and a check.

Everything a client sends ends up in a NATS message (MessagePack, at most 1 MiB
with the server's default `max_payload`) and in Postgres (`text`, `jsonb`,
`integer`/`bigint` columns). Values those cannot hold are refused at the edge,
before anything is appended: a value the log accepted but a projection cannot
store would stall that projection and break rebuilds.

`check_storable` walks a decoded JSON (or MessagePack) value once and raises
`Unstorable` naming the path of the first bad part. It is pure and cheap (a few
microseconds for a typical request body), so the gateway runs it on every body
and the NATS side can run it on what it receives.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Integer columns: Postgres `integer` (block limits, versions) and `bigint`
# (sequences); MessagePack and JSONB numbers are held to int64 as well.
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# NATS refuses a message over its server's max_payload (1 MiB by default).
NATS_MAX_PAYLOAD = 1024 * 1024
# One text (a message's content, a block value, an archival passage, a system
# prompt), in UTF-8 bytes: a quarter of a NATS payload, so the text fits in the
# command and in each event that carries it, with the envelope around it.
MAX_TEXT_BYTES = 256 * 1024
# All input text of one message request together (it travels in one StartRun
# command and one RunStarted event), in UTF-8 bytes.
MAX_INPUT_TEXT_BYTES = MAX_TEXT_BYTES
# Messages in one request. Letta clients send one (a few with system or
# assistant turns); every message of a request is one command and one event, so
# the count is held to what a person or program sends in one turn, and the text
# limit above holds their size.
MAX_MESSAGES_PER_REQUEST = 100
# A structured value a client sets (metadata, llm_config, a tool's JSON schema,
# secrets, a client tool's parameters), as JSON, in bytes.
MAX_OBJECT_BYTES = 64 * 1024
# Nesting of objects and arrays in any value (the request body included).
MAX_DEPTH = 64
# Names (agents), labels (blocks) and tool names, in characters.
MAX_NAME_CHARS = 256
MAX_LABEL_CHARS = 128
# Descriptions (agents, blocks, tools), in characters.
MAX_DESCRIPTION_CHARS = 16 * 1024
# Tags on one resource, and the length of each.
MAX_TAGS = 64
MAX_TAG_CHARS = 256
# Entries in a list of ids or rules in one request (block_ids, tool_ids, tool_rules ...).
MAX_LIST_ITEMS = 256
# Passages put into an archive with one request: one event holds them with a vector each
# (8 KB at 1536 dimensions), and their text together is held to MAX_TEXT_BYTES.
MAX_ARCHIVE_BATCH = 64
# Memory blocks created with one agent (each is a command of its own), and client
# tools in one message request (together at most MAX_OBJECT_BYTES as JSON).
MAX_MEMORY_BLOCKS = 64
MAX_CLIENT_TOOLS = 64
# A request body as the gateway reads it (`O_MAX_BODY_BYTES` overrides).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# One image in a message, decoded (Anthropic's limit per image; OpenAI's is higher). Its
# bytes travel in no NATS message (they go to the object store: o_runtime/images.py),
# so only this and the body limit above hold them.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
# An image's data as a client sends it: base64, or a `data:` URL (a short header more).
MAX_IMAGE_DATA_CHARS = 4 * ((MAX_IMAGE_BYTES + 2) // 3) + 256
# Where a message request carries image data (a user message's content parts, also as
# `input`; a client tool's result parts): the strings there may be longer than MAX_TEXT_BYTES.
IMAGE_DATA_PATHS = re.compile(
    r"body\.(?:input|messages\[\d+\]\.(?:content|approvals\[\d+\]\.tool_return))\[\d+\]"
    r"\.source\.(?:data|url)"
)

_SURROGATE = re.compile("[\ud800-\udfff]")


def input_over_limit(size: int) -> str | None:
    """Why a request's input text is refused (None: it is not). One wording for the HTTP
    API and for a StartRun from NATS (o_contracts/commands.py), so both say the same."""
    if size <= MAX_INPUT_TEXT_BYTES:
        return None
    return (
        f"the messages of one request carry {size} bytes of text (UTF-8), over the"
        f" limit of {MAX_INPUT_TEXT_BYTES}"
    )


def client_tools_over_limit(size: int) -> str | None:
    """Why a request's client tools are refused (None: they are not); as above."""
    if size <= MAX_OBJECT_BYTES:
        return None
    return f"client_tools are about {size} bytes as JSON, over the limit of {MAX_OBJECT_BYTES}"


class Unstorable(ValueError):
    """A value that cannot be recorded; `path` names the part (`messages[0].content`)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


def utf8_len(text: str) -> int:
    """The length of `text` in UTF-8 (a lone surrogate counts as 3 bytes)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def check_text(text: str, path: str = "", max_bytes: int | None = MAX_TEXT_BYTES) -> int:
    """A string Postgres and UTF-8 can hold, at most `max_bytes` long as UTF-8; its length."""
    if "\x00" in text:
        raise Unstorable(path, "contains a NUL character (\\u0000), which cannot be stored")
    if text.isascii():
        size = len(text)
    elif _SURROGATE.search(text) is not None:
        raise Unstorable(path, "contains a lone UTF-16 surrogate, which is not valid Unicode")
    else:
        size = len(text.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        raise Unstorable(path, f"is {size} bytes as UTF-8, over the limit of {max_bytes}")
    return size


def check_storable(
    value: Any,
    path: str = "",
    *,
    max_depth: int = MAX_DEPTH,
    max_text_bytes: int | None = MAX_TEXT_BYTES,
    max_bytes: int | None = None,
    long_texts: re.Pattern[str] | None = None,
) -> int:
    """Raise `Unstorable` unless `value` can be recorded; return its size as JSON (about).

    A storable value is None, a bool, an int within int64, a finite float, a
    string (keys included) with no NUL and no lone surrogate and at most
    `max_text_bytes` of UTF-8 (`MAX_IMAGE_DATA_CHARS` at paths `long_texts` matches),
    or a list or dict of storable values nested at most `max_depth` deep; with
    `max_bytes`, its size as JSON is at most that.
    """
    size = _walk(value, path, 0, max_depth, max_text_bytes, long_texts)
    if max_bytes is not None and size > max_bytes:
        raise Unstorable(path, f"is about {size} bytes as JSON, over the limit of {max_bytes}")
    return size


def _walk(
    value: Any,
    path: str,
    depth: int,
    max_depth: int,
    max_text: int | None,
    long_texts: re.Pattern[str] | None = None,
) -> int:
    # Type checks by identity first: exact builtins are what decoders produce.
    kind = type(value)
    if kind is str:
        if (
            long_texts is not None
            and max_text is not None
            and len(value) > max_text
            and long_texts.fullmatch(path)
        ):
            return check_text(value, path, MAX_IMAGE_DATA_CHARS) + 2
        return check_text(value, path, max_text) + 2
    if kind is dict or isinstance(value, dict):
        if depth >= max_depth:
            raise Unstorable(path, f"is nested more than {max_depth} levels deep")
        size = 2
        for key, item in value.items():
            if type(key) is not str:
                raise Unstorable(path, f"has a key that is not a string: {key!r:.40}")
            where = f"{path}.{key}" if path else key
            size += (
                check_text(key, where, max_text)
                + 4
                + _walk(item, where, depth + 1, max_depth, max_text, long_texts)
            )
        return size
    if kind is list or isinstance(value, list | tuple):
        if depth >= max_depth:
            raise Unstorable(path, f"is nested more than {max_depth} levels deep")
        size = 2
        for i, item in enumerate(value):
            size += 1 + _walk(item, f"{path}[{i}]", depth + 1, max_depth, max_text, long_texts)
        return size
    if kind is bool or value is None:
        return 5
    if kind is int or isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise Unstorable(path, "is an integer outside the 64-bit range that can be stored")
        return 20
    if kind is float or isinstance(value, float):
        if not math.isfinite(value):
            raise Unstorable(path, "is not a finite number (NaN and infinities cannot be stored)")
        return 24
    raise Unstorable(path, f"has a value of type {kind.__name__}, which cannot be stored")
