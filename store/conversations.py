"""Conversations as prompts (issue 31): a prompt may be a list of messages, system, user and assistant turns, the
last one the user's. The store keeps it in the prompt's one text column as the messages' canonical JSON
(`conversation_text`), so a conversation is one prompt, deduplicated and keyed like any other; a single-string
prompt stays the string it is, and a conversation of one user turn is stored as that turn's text.

Only the canonical form reads back as a conversation (`conversation_of`): a prompt that merely looks like JSON stays
text. training/models.py::prompt_messages reads the same form (training does not import the store); a test holds
the two to each other."""

from __future__ import annotations

import json

from store.errors import UserError

ROLES = ("system", "user", "assistant")


def _canonical(messages: list[dict]) -> str:
    return json.dumps([{"role": m["role"], "content": m["content"]} for m in messages], ensure_ascii=False)


def conversation_problem(messages: object) -> str | None:
    """Why `messages` cannot be a prompt (None: it can): a non-empty list of {"role", "content"} objects, roles
    system (first only), user and assistant, contents non-empty text, the last turn the user's."""
    if not isinstance(messages, list) or not messages:
        return "a conversation must be a non-empty list of messages"
    for n, m in enumerate(messages, 1):
        if not isinstance(m, dict) or set(m) - {"role", "content"} or not {"role", "content"} <= set(m):
            return f"message {n} must be an object with exactly 'role' and 'content'"
        if m["role"] not in ROLES:
            return f"message {n} has role {m['role']!r}; roles are {', '.join(ROLES)}"
        if m["role"] == "system" and n > 1:
            return f"message {n} is a system message; only the first may be"
        if not isinstance(m["content"], str) or not m["content"].strip():
            return f"message {n} has no text content"
    if messages[-1]["role"] != "user":
        return f"the last message is the {messages[-1]['role']}'s; a prompt ends with the user's turn"
    return None


def conversation_text(messages: list[dict]) -> str:
    """The stored text of a conversation (checked first: a UserError says what is wrong); one user turn is its
    text."""
    if problem := conversation_problem(messages):
        raise UserError(problem)
    if len(messages) == 1:
        return messages[0]["content"]
    return _canonical(messages)


def prompt_text(value: object, field: str = "prompt") -> str:
    """A prompt as a file gives it, a string or a conversation, as the store keeps it."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return conversation_text(value)
    raise UserError(f"'{field}' must be a string or a conversation (a list of {{role, content}} messages)")


def conversation_of(text: str) -> list[dict] | None:
    """The messages of a stored conversation prompt; None for a text prompt."""
    if not text.startswith('[{"role": '):
        return None
    try:
        messages = json.loads(text)
    except ValueError:
        return None
    if conversation_problem(messages) or len(messages) < 2 or _canonical(messages) != text:
        return None
    return messages


def messages_of(text: str) -> list[dict]:
    """Any stored prompt as messages: a conversation's, or one user turn."""
    return conversation_of(text) or [{"role": "user", "content": text}]


def last_turn(text: str) -> str:
    """What the user asks last: the text of a text prompt, the last user turn of a conversation."""
    return messages_of(text)[-1]["content"]
