"""Text from the store on a terminal: an annotator's skip reason or name is theirs to choose, so it is shown with
every control character escaped (`\x1b`, `\u202e`), never sent raw to the terminal, where an escape sequence could
rewrite the screen, set the window title or hide a line."""

from __future__ import annotations


def shown(text: object) -> str:
    """`text` with each character that is not printable (C0/C1 controls, DEL, bidi overrides, line and paragraph
    separators) written as its Python escape; spaces stay."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in str(text))
