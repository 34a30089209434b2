"""Who may use the service: a file of `CLIENT TOKEN` lines (# starts a comment), read once at start. A token on the
command line would show in every process listing, so there is no option for one; the file must be readable by its
owner alone, as ssh asks of a key."""

from __future__ import annotations

import hmac
import re
from pathlib import Path

MIN_TOKEN = 16  # characters: a guessable token is refused at start, not found by a client
_CLIENT = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


class TokenFileError(ValueError):
    """The tokens file cannot be used, in one line."""


def read_tokens(path: Path) -> dict[str, str]:
    """token -> client name, or TokenFileError: missing, readable by others, a malformed line, a short or shared token."""
    if not path.is_file():
        raise TokenFileError(f"no tokens file {path}")
    if path.stat().st_mode & 0o077:
        raise TokenFileError(f"tokens file {path} is readable by others: chmod 600 {path}")
    tokens: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not (line := line.split("#", 1)[0].strip()):
            continue
        parts = line.split()
        if len(parts) != 2 or not _CLIENT.match(parts[0]):
            raise TokenFileError(f"{path}:{number}: expected `CLIENT TOKEN` (client: letters, digits, _.@-)")
        client, token = parts
        if len(token) < MIN_TOKEN:
            raise TokenFileError(f"{path}:{number}: the token of {client} is shorter than {MIN_TOKEN} characters")
        if token in tokens:
            raise TokenFileError(f"{path}:{number}: {client} shares a token with {tokens[token]}")
        tokens[token] = client
    if not tokens:
        raise TokenFileError(f"tokens file {path} names no client")
    return tokens


def client_of(tokens: dict[str, str], authorization: str | None) -> str | None:
    """The client a `Bearer TOKEN` header names, or None. Every token is compared in constant time, so the time an
    answer takes says nothing of how close a guess was."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return None
    found = None
    for token, client in tokens.items():
        if hmac.compare_digest(token.encode(), given.strip().encode()):
            found = client
    return found
