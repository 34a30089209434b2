"""Running the service: its socket bound here (so port 0 can say which port it got before the first request), then
uvicorn serving the app until SIGINT or SIGTERM."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable

import uvicorn

from db import Database
from evaluator.contracts import EvalSettings
from judging.judge import Backend
from service.app import Service
from service.config import ServiceConfig
from service.intake import board_of
from service.tokens import read_tokens


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(database: Database, settings: EvalSettings, config: ServiceConfig, problems_dir: Path | None,
          say: Callable[[str], None], backend: Backend | None = None) -> None:
    """Serves until stopped, judging with the local evaluator or `backend` (the Ray one). The tokens are read
    first (TokenFileError: nothing is bound); `say` hears the address."""
    tokens = read_tokens(config.tokens)
    config.work_dir.mkdir(parents=True, exist_ok=True)
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    say(f"serving {len(tokens)} client(s) on http://{host}:{port}, judging {board_of(settings)}")
    app = Service(database, settings, config, tokens, problems_dir, backend).app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    server.run(sockets=[sock])
