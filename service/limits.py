"""How much one client may ask: a request rate per token (a token bucket) and a body size, both checked before any
work is done for the request, and how many jobs it may have open, checked where a submit would queue one."""

from __future__ import annotations

import threading
import time

from starlette.requests import Request

from db import Database, JobRow


class TooLarge(Exception):
    """The body is over the limit (it is not read further)."""


class TooManyOpenJobs(Exception):
    """OpenJobLimit's refusal: the client has as many jobs open as it may. Why, in one line; nothing is stored for
    the request."""


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


class OpenJobLimit:
    """At most `most` jobs open (queued or running) per client on the board, so one client cannot fill the queue
    for everyone. Only a submit that would queue a job meets it (a new job, or a cancelled one asked for again):
    one answered by a job already queued, running or finished adds nothing to judge and always passes. The count
    and the enqueue are made under one lock, so a client's submits at once cannot pass the limit together (one
    server per database and board: no other process queues this board's jobs)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._lock = threading.Lock()

    def enqueue(self, database: Database, client: str, key: str, board: str, **fields: str) -> tuple[JobRow, bool]:
        """database.enqueue_job's answer, or TooManyOpenJobs saying how many jobs the client has open."""
        with self._lock:
            queues = database.job_state(key) in (None, "cancelled")
            if queues and (open_jobs := database.open_job_count(client, board)) >= self.most:
                raise TooManyOpenJobs(f"open-job limit: you have {open_jobs} jobs queued or running, "
                                      f"at most {self.most} per client; submit again once one finishes")
            return database.enqueue_job(client, key, board, **fields)
