"""The files and folders a command writes, as the user named them: a path they cannot take is one line naming the
option (UserError), never an OSError's traceback from deep inside the writer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kforge.app import UserError


@contextmanager
def writing(option: str, path: Path) -> Iterator[None]:
    """What the system refuses while writing under path (no such parent, read-only, permission) said in one line."""
    try:
        yield
    except OSError as exc:
        inside = f" {exc.filename}" if exc.filename and str(exc.filename) != str(path) else ""
        raise UserError(f"{option} {path}: cannot write{inside}: {exc.strerror or exc}") from None


def folder(option: str, path: Path) -> Path:
    """A folder to write into, made with its parents where missing."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path}: is a file; name a folder (made if missing)")
    with writing(option, path):
        path.mkdir(parents=True, exist_ok=True)
    return path


def file(option: str, path: Path) -> Path:
    """A file to write (made, or overwritten)."""
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder; name a file to write")
    return path
