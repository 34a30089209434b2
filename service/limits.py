"""How much one client may ask: a request rate per token (a token bucket) and a body size, both checked before any
work is done for the request."""

from __future__ import annotations

import time

from starlette.requests import Request


class TooLarge(Exception):
    """The body is over the limit (it is not read further)."""


class RateLimiter:
    """One bucket per client: `burst` requests at once, refilled at `rate_per_s`. Used from the event loop only."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate, self.burst = rate_per_s, burst
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)

    def wait_s(self, client: str) -> float:
        """0 and one request taken, or the seconds until the client may ask again (nothing taken)."""
        now = time.monotonic()
        tokens, then = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1:
            self._buckets[client] = (tokens, now)
            return (1 - tokens) / self.rate
        self._buckets[client] = (tokens - 1, now)
        return 0.0


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or TooLarge as soon as it is known to be larger than `limit`: from its Content-Length before a
    byte is read, else while it streams in (a chunked body)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLarge
    return bytes(body)
