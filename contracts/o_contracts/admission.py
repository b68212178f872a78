"""Whether a command may be taken from the subject it came on: the subject names what it
acts on.

Commands are keyed by what they act on (`o.cmd.executor.<agent or conversation>`,
`o.cmd.memory.<block, agent or archive>`, `o.cmd.evolution.<agent>`, `o.cmd.schedule.<agent>`,
`o.cmd.callback.<run>`), and a NATS identity can be
allowed to publish on some keys only (an outside publisher restricted to its agents:
o_setup/roles.py). So every consumer refuses a command whose body acts on something else
than its subject's key: the server's permission on the subject is then the whole of
ownership. O's own senders always key commands this way.
"""

from __future__ import annotations

from o_contracts.base import Message
from o_contracts.commands import DeliverCallback, StartRun
from o_contracts.file_commands import ProcessFile


def subject_key(subject: str) -> str:
    return subject.rsplit(".", 1)[-1]


def acts_on(command: Message) -> str | None:
    """The key a command's subject must carry; None for a command with no such key."""
    if isinstance(command, StartRun):
        return command.lane.key
    if isinstance(command, DeliverCallback):  # (one run's delivery: o.cmd.callback.<run>)
        return command.run_id
    if isinstance(command, ProcessFile):  # (one file's processing: o.cmd.files.<file>)
        return command.file_id
    # An archive's commands are keyed by the archive, attaching it to an agent included: an
    # outside publisher allowed only its agents can neither make archives nor attach one
    # (which would let its agent read the archive, and write into it).
    for field in ("block_id", "archive_id", "agent_id"):
        value = getattr(command, field, None)
        if isinstance(value, str):
            return value
    return None


def wrong_subject(subject: str, command: Message) -> str | None:
    """Why `command` may not be taken from `subject` (None: it may)."""
    expected = acts_on(command)
    if expected is None or subject_key(subject) == expected:
        return None
    return (
        f"{command.type_name()} acts on {expected}, but was sent on {subject}: a command is"
        f" sent on the subject of what it acts on"
    )
