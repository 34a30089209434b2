"""How one server runs: where it listens, who may ask and how much, how it batches, where it keeps the files it
judges. The CLI fills it from its options; nothing here reads the environment."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class ServiceConfig(BaseModel):
    host: str = "127.0.0.1"  # loopback unless told otherwise: the service is reached from another machine only on purpose
    port: int = Field(8765, ge=0, le=65535)  # 0: any free port (the server says which)
    tokens: Path  # the file of client tokens (service.tokens); never a token on the command line
    max_request_bytes: int = Field(1 << 20, ge=1024)  # a body larger is refused (413) before it is read whole
    rate_per_s: float = Field(20.0, gt=0)  # requests a token may make per second, on average ...
    burst: int = Field(100, ge=1)  # ... and at once
    max_open_jobs: int = Field(512, ge=1)  # jobs one client may have queued or running: a submit past it is 429
    batch: int = Field(8, ge=1)  # queued jobs of one problem judged together (one reference run, compiles in parallel)
    workers: int | None = Field(None, ge=1)  # batches judged at once (service.worker.lanes; None: one per local GPU)
    poll_s: float = Field(0.5, gt=0)  # how often an idle worker and a verdict stream look at the queue
    work_dir: Path  # the candidate and problem files the jobs are judged from, by content hash
