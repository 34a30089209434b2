"""`kforge serve`: the shared judging service (service/) started from the command line, with kforge's own settings
for the db and the evaluation. Its packages load only when it runs, so the CLI starts without the serve extra."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from kforge.app import (AddressOpt, BackendOpt, DbOpt, DeviceOpt, GpusOpt, PrecisionOpt, RunnerOpt, SizeOpt, UserError,
                        app, err, eval_settings, friendly, open_db, problems_dir, runner_for)

TokensOpt = Annotated[Path, typer.Option("--tokens", metavar="FILE", help="file of `CLIENT TOKEN` lines, readable by its owner alone")]
HostOpt = Annotated[str, typer.Option("--host", metavar="ADDRESS", help="address to bind (default loopback; 0.0.0.0 for every interface)")]
PortOpt = Annotated[int, typer.Option("--port", metavar="PORT", help="port to listen on (0: any free one, said at start)")]
WorkOpt = Annotated[Optional[Path], typer.Option("--work-dir", metavar="DIR", help="where the jobs' files are kept "
                                                 "(default ~/.kforge/serve)")]


def _say(line: str) -> None:
    err.print(f"kforge: {line}", markup=False, highlight=False, soft_wrap=True)


@friendly
def serve(tokens: TokensOpt, host: HostOpt = "127.0.0.1", port: PortOpt = 8765, db: DbOpt = None,
          device: DeviceOpt = None, size: SizeOpt = "auto", precision: PrecisionOpt = "fp32",
          backend: BackendOpt = None, work_dir: WorkOpt = None, gpus: GpusOpt = None, runner: RunnerOpt = "local",
          address: AddressOpt = None,
          workers: Annotated[Optional[int], typer.Option(min=1, metavar="N", help="batches judged at once (default: one "
                                                         "per GPU; 1 on CPU, 2 on Ray)")] = None,
          batch: Annotated[int, typer.Option(metavar="N", help="queued jobs of one problem judged together")] = 8,
          max_request_kb: Annotated[int, typer.Option(metavar="KIB", help="largest request body accepted, in KiB")] = 1024,
          rate: Annotated[float, typer.Option(metavar="R", help="requests per second one token may make, on average")] = 20.0,
          burst: Annotated[int, typer.Option(metavar="N", help="requests one token may make at once")] = 100,
          max_open_jobs: Annotated[int, typer.Option(metavar="N", help="jobs one token may have queued or running; a submit "
                                                     "past it is refused (429) until some finish")] = 512) -> None:
    """Serve judging over HTTP: clients with a token submit jobs, read verdicts, see the queue, cancel."""
    try:
        from service.config import ServiceConfig
        from service.server import serve as run_server
        from service.tokens import TokenFileError
    except ImportError as exc:
        raise UserError(f"kforge serve needs the serve extra ({exc.name} is missing): pip install -e '.[serve]'") from None
    settings = eval_settings(device, size, gpus=gpus, backend=backend, precision=precision)
    judge = runner_for(runner, address)
    config = ServiceConfig(host=host, port=port, tokens=tokens, max_request_bytes=max_request_kb * 1024,
                           rate_per_s=rate, burst=burst, max_open_jobs=max_open_jobs, batch=batch, workers=workers,
                           work_dir=work_dir or Path.home() / ".kforge" / "serve")
    log = logging.getLogger("kforge.service")
    log.addHandler(logging.StreamHandler())
    log.setLevel(logging.INFO)
    try:
        run_server(open_db(db), settings, config, problems_dir(), _say, judge)
    except TokenFileError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def register() -> None:
    """Adds `serve` to kforge's app (once)."""
    if not any(command.callback is serve for command in app.registered_commands):
        app.command("serve")(serve)
