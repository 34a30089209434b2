"""Near-duplicate candidates: two files whose code differs only in comments and whitespace (Python's, and the C++/CUDA
ones inside its strings) have the same normalized hash, and the second is not evaluated: it gets the first's verdict."""

from __future__ import annotations

import hashlib
import io
import re
import tokenize

C_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)  # applied inside string literals only: `a // b` is Python
WHITESPACE = re.compile(r"\s+")
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_MARKS = {tokenize.NEWLINE: "\n", tokenize.INDENT: "\x01", tokenize.DEDENT: "\x02"}  # structure kept, widths not


def normalized(source: str) -> str | None:
    """The code's tokens without comments or whitespace; None when it does not tokenize (such code is never run)."""
    parts = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in _SKIPPED:
                continue
            text = _MARKS.get(token.type, token.string)
            if token.type == tokenize.STRING:
                text = WHITESPACE.sub("", C_COMMENTS.sub("", text))
            parts.append(text)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return " ".join(parts)


def normalized_sha256(source: str) -> str | None:
    text = normalized(source)
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()
