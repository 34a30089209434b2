"""What came back from one evaluator child (its messages in order, how it ended, its log), and the readings the
judge takes of it. spawn.py runs the child; this is what the rest of the evaluator reads."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterator, TypeVar

from pydantic import BaseModel, Field, ValidationError

from evaluator.contracts import Status
from evaluator.protocol import CANDIDATE_EVENTS, Message, misfits

M = TypeVar("M", bound=Message)

# A result-pipe line longer than this is not read: each line is held whole in kforge's memory while it is read. The
# harness's longest are a timing message (~22 bytes a sample: 22 KB at the default 1,000 reps, 16 MiB holds 700,000)
# and a timed call's handoff (its glimpse, ~16 KB of hex per output: 16 MiB holds a thousand outputs).
MAX_LINE_BYTES = 16 * 2**20
OVERSIZED = "oversized"  # the event the reader puts in place of a line over MAX_LINE_BYTES

_OPEN_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


def open_regular(path: Path | str, size: int | None = None) -> int:
    """A file in a child's scratch, opened for the trusted side to read. The child may have put something else
    there: a FIFO holds a plain open() until a writer comes (the comparer waited out its whole timeout, and its
    problem's next candidate was judged `reference_error`), so does a file it holds a lease on (45 s a call), and a
    link may name any file kforge can read. So: no link followed, no wait, no controlling terminal, and anything
    but a regular file (of `size` bytes, where given) is refused with OSError before a byte is read."""
    try:
        fd = os.open(path, _OPEN_READ)
    except BlockingIOError:  # a lease another process holds on it (fcntl F_SETLEASE)
        raise OSError(errno.EWOULDBLOCK, "leased by another process: opening it would wait", str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "something else")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
        if size is not None and st.st_size != size:
            raise OSError(errno.EINVAL, f"holds {st.st_size:,} bytes, not the {size:,} described", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_end(path: Path, chars: int) -> str:
    """The last `chars` of a file a child wrote (its log, a tool's output), read from the end: '' where there is
    none, the refusal where it is not a regular file (its evidence, not a hang of kforge's)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"[kforge did not read {path.name}: {exc.strerror}]"
    with os.fdopen(fd, "rb") as fh:
        fh.seek(max(0, fh.seek(0, os.SEEK_END) - chars))
        return fh.read().decode(errors="replace")[-chars:]


def lines(fh: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """A child's result-pipe lines as they arrive, none held longer than `limit` bytes: a longer one (a gigabyte
    without a newline) ends the channel there with an `oversized` line in its place, which the channel check names
    forged. Reading stops, so the child's next write fails and it ends; its budget ends one that ignores that."""
    while line := fh.readline(limit + 1):
        if len(line) > limit:
            yield json.dumps({"event": OVERSIZED, "text": line[:80].decode(errors="replace")}).encode() + b"\n"
            return
        yield line


class Budget(BaseModel):
    """A budget of the parent's own that a child was stopped at (its compilers idle, its disk quota): the judge's
    readings of how it ended (a timeout of the whole limit, a kill) would misname it."""

    status: Status
    cause: str


class ChildResult(BaseModel):
    """What came back from a child: its messages (in order), how it ended, and its log."""

    messages: list[dict] = Field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    cancelled: bool = False  # kforge was interrupted: not a verdict on the candidate
    spawned: float = 0.0  # time.monotonic() when the process was started
    started: float = 0.0  # time.monotonic() when the request went out: the child's clock starts here
    wall_s: float = 0.0
    stragglers: int = 0  # processes still carrying the child's token after it ended (killed)
    over: Budget | None = None  # the parent's budget it was stopped at, if any
    log_path: Path

    def last(self, event: str, **match) -> dict | None:
        """The last message of an event whose keys hold the values in `match`."""
        return next((m for m in reversed(self.messages) if m.get("event") == event and m.items() >= match.items()), None)

    def read(self, kind: type[M], **match) -> M | None:
        """The last message of a kind (whose keys hold `match`), as its protocol model. One that does not fit raises
        ValueError, on one line: the harness never sends one, so the candidate wrote it."""
        found = self.last(kind.model_fields["event"].default, **match)
        try:
            return None if found is None else kind.model_validate(found)
        except ValidationError as exc:
            raise ValueError(f"{kind.__name__.lower()} message: {misfits(exc)}") from None

    def arrival(self, event: str, **match) -> float | None:
        """The parent's clock (time.monotonic) when the first matching message arrived."""
        found = next((m for m in self.messages if m.get("event") == event and m.items() >= match.items()), None)
        return found["_t"] if found else None

    def stage_seconds(self, until: float | None = None) -> dict[str, float]:
        """Wall seconds per stage the child announced, by the parent's clock, up to its end (or `until`, for a child
        that goes on). `load`: from its spawn to its `loaded` message (interpreter, jail, torch; no device is held
        meanwhile), apart from the rest; `start`: from the request to the child reading it; `setup`: its device
        and problem (a forged stage message only mislabels the child's own time)."""
        last = self.started + self.wall_s if until is None else until
        marks = [("start", self.started)] + [(str(m.get("stage")), m["_t"]) for m in self.messages
                                             if m.get("event") == "stage" and m["_t"] <= last]
        ends = [t for _, t in marks[1:]] + [last]
        loaded = self.arrival("loaded")
        load = {"load": round(loaded - self.spawned, 3)} if loaded is not None and self.spawned else {}
        return load | {name: round(end - t, 3) for (name, t), end in zip(marks, ends)}

    def forged(self) -> str:
        """A message the harness would never send (the candidate wrote to the result channel itself), or ''."""
        seen = set()
        for i, m in enumerate(self.messages):
            event, key = m.get("event"), (m.get("event"), m.get("stage") or m.get("which"))
            if event == OVERSIZED:
                head = str(m.get("text", ""))[:80]
                return f"a line of over {MAX_LINE_BYTES:,} bytes, which kforge did not read: {head!r}"
            if event == "garbled" and i < len(self.messages) - 1:  # a cut-off last line is a death, not a forgery
                return f"a line that is not a harness message: {m.get('text', '')[:80]!r}"
            if event not in CANDIDATE_EVENTS | {"garbled"} or key in seen:
                return f"an unexpected or repeated {event!r} message {m.get('stage') or m.get('which') or ''}".rstrip()
            seen.add(key)
        return ""

    @property
    def stage(self) -> str:
        stage = self.last("stage")
        return str(stage.get("stage")) if stage else "startup"  # a forged stage message names no stage: "None"

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the log, read from the end: a candidate may have printed gigabytes, or made it a FIFO."""
        return read_end(self.log_path, chars)
