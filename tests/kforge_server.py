"""`python -m kforge serve` as a process of a test: started on a port of its own on 127.0.0.1, with a tokens file."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from service.client import ServiceClient

REPO = Path(__file__).resolve().parents[1]


class Server:
    """One `kforge serve` process: its base URL once it said where it listens, its stderr, stopped by its pid."""

    def __init__(self, tmp_path: Path, env: dict, db_url: str, tokens: Path, *options: str) -> None:
        self.log = tmp_path / f"serve-{secrets.token_hex(3)}.log"
        args = [sys.executable, "-m", "kforge", "serve", "--tokens", str(tokens), "--port", "0", "--db", db_url,
                "--device", "cpu", "--size", "small", "--work-dir", str(tmp_path / "work"), *options]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        self.url = self._address()

    def _address(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for line in self.text().splitlines():
                if " on http://" in line:
                    return line.split(" on ", 1)[1].split(",")[0]
            assert self.proc.poll() is None, self.text()
            time.sleep(0.2)
        raise AssertionError(f"the server said no address: {self.text()}")

    def text(self) -> str:
        return self.log.read_text()

    def client(self, token: str) -> ServiceClient:
        return ServiceClient(self.url, token)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def token_file(path: Path, clients: list[str]) -> dict[str, str]:
    """A tokens file readable by its owner alone, and each client's token."""
    tokens = {client: secrets.token_hex(16) for client in clients}
    path.write_text("# client token\n" + "".join(f"{c} {t}\n" for c, t in tokens.items()))
    path.chmod(0o600)
    return tokens


