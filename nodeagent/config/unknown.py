"""The fields of a contract message this agent does not know.

An agent older than a field parses a snapshot that carries it and keeps the field aside
as unknown: protobuf never fails on it. A route rule's new field is a filter (or a
filter's new value) the agent would not apply, so a rule that carries one is not served
as written (`rules.py`): docs/operations.md, "Upgrading: agents before the control
plane"."""

from __future__ import annotations

from google.protobuf import unknown_fields
from google.protobuf.message import Message


def unknown_field_paths(message: Message, prefix: str = "") -> tuple[str, ...]:
    """Every unknown field of `message` and of the messages it holds, as
    `<known field>.<number>` paths ("11", "redirect.6"), in field order."""
    fields = unknown_fields.UnknownFieldSet(message)
    found = [f"{prefix}{fields[i].field_number}" for i in range(len(fields))]
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None or descriptor.message_type.GetOptions().map_entry:
            continue
        inner = f"{prefix}{descriptor.name}."
        items = value if descriptor.is_repeated else (value,)
        for item in items:
            found += unknown_field_paths(item, inner)
    return tuple(dict.fromkeys(found))
