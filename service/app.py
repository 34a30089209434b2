"""The HTTP front: every route but /health needs a client's bearer token and is rate limited per token; a client
may have only so many jobs open, and reads and cancels only the jobs it asked for (another's answers 404, as a job
that does not exist). Database calls run in the thread pool, so a slow write never stalls the event loop; the
worker judges in a thread of its own."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import anyio
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from db import Database, JobRow
from evaluator.contracts import EvalSettings, Verdict
from judging.judge import Backend
from service.config import ServiceConfig
from service.contracts import CodeView, JobRequest, JobView, QueueView
from service.intake import Refused, accept, board_of
from service.limits import OpenJobLimit, RateLimiter, TooLarge, TooManyOpenJobs, read_body
from service.tokens import client_of
from service.worker import Workers, batch_bound_s

Handler = Callable[[Request, str], Awaitable[Response]]


def error(status: int, why: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": why}, status_code=status, headers=headers)


def view(row: JobRow, created: bool | None = None) -> JobView:
    """The client's view of a stored job, its verdict rebuilt from the stored evaluation as every reader does."""
    verdict = Verdict.from_row(row.evaluation) if row.evaluation else None
    reused = bool(row.evaluation and row.started_at and row.evaluation.created_at < row.started_at)
    return JobView(id=row.id, state=row.state, problem=row.problem_name, candidate_sha256=row.candidate_sha256,
                   position=row.position, created=created, evaluation_id=row.evaluation and row.evaluation.id,
                   verdict=verdict, reused=reused, error=row.error, submitted_at=row.created_at,
                   started_at=row.started_at, finished_at=row.finished_at)


def answer(model, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


class Service:
    """The routes over one database, one board and one set of tokens."""

    def __init__(self, database: Database, settings: EvalSettings, config: ServiceConfig, tokens: dict[str, str],
                 problems_dir: Path | None, backend: Backend | None = None) -> None:
        self.database, self.settings, self.config, self.tokens = database, settings, config, tokens
        self.problems_dir = problems_dir
        self.limiter = RateLimiter(config.rate_per_s, config.burst)
        self.open_jobs = OpenJobLimit(config.max_open_jobs)
        self.worker = Workers(database, settings, config, problems_dir, backend)

    def guarded(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """The token, then the client's rate, checked before the handler does anything."""

        async def endpoint(request: Request) -> Response:
            client = client_of(self.tokens, request.headers.get("authorization"))
            if client is None:
                return error(401, "a valid bearer token is required", **{"WWW-Authenticate": "Bearer"})
            if wait := self.limiter.wait_s(client):
                return error(429, f"rate limit: try again in {wait:.2f} s", **{"Retry-After": str(math.ceil(wait))})
            return await handler(request, client)

        return endpoint

    async def submit(self, request: Request, client: str) -> Response:
        try:
            body = JobRequest.model_validate_json(await read_body(request, self.config.max_request_bytes))
            row, made = await run_in_threadpool(accept, self.database, client, body, self.settings,
                                                self.config.work_dir, self.problems_dir, self.open_jobs)
        except TooLarge:
            return error(413, f"request body over {self.config.max_request_bytes} bytes")
        except ValidationError as exc:
            return error(422, "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()))
        except Refused as exc:
            return error(422, str(exc))
        except TooManyOpenJobs as exc:  # no Retry-After: it lasts until the client's jobs finish, which no clock says
            return error(429, str(exc))
        return answer(view(row, made), 201 if made else 200)

    async def _own(self, request: Request, client: str, with_source: bool = False) -> JobRow | None:
        job_id = request.path_params["job_id"]
        return await run_in_threadpool(self.database.client_job, job_id, client, with_source)

    async def job(self, request: Request, client: str) -> Response:
        row = await self._own(request, client)
        return answer(view(row)) if row else error(404, "no such job")

    async def code(self, request: Request, client: str) -> Response:
        row = await self._own(request, client, with_source=True)
        if row is None:
            return error(404, "no such job")
        return answer(CodeView(id=row.id, candidate_sha256=row.candidate_sha256, candidate=row.source))

    async def cancel(self, request: Request, client: str) -> Response:
        row = await run_in_threadpool(self.database.cancel_job, request.path_params["job_id"], client)
        if row is None:
            return error(404, "no such job")
        if row.state != "cancelled":
            return error(409, f"job {row.id} is {row.state}: only a queued job can be cancelled")
        return answer(view(row))

    async def queue(self, request: Request, client: str) -> Response:
        board = board_of(self.settings)
        counts = await run_in_threadpool(self.database.queue_counts, board)
        mine = await run_in_threadpool(self.database.client_jobs, client, True)
        return answer(QueueView(board=board, queued=counts["queued"], running=counts["running"],
                                jobs=[view(row) for row in mine],
                                batch_bound_s=batch_bound_s(self.settings, self.config.batch)))

    async def events(self, request: Request, client: str) -> Response:
        """Server-sent events: the job each time its state or place changes, the last one when it is finished."""
        first = await self._own(request, client)
        if first is None:
            return error(404, "no such job")
        return StreamingResponse(self._changes(request, client), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    async def _changes(self, request: Request, client: str) -> AsyncIterator[str]:
        said = None
        while True:
            now = view(await self._own(request, client))
            if (now.state, now.position) != said:
                said = (now.state, now.position)
                yield f"event: job\ndata: {now.model_dump_json()}\n\n"
            if now.finished:
                return
            await anyio.sleep(self.config.poll_s)

    async def health(self, request: Request) -> Response:
        """Unauthenticated and says nothing of any job: for a supervisor or a test waiting for the port."""
        return JSONResponse({"ok": True, "board": board_of(self.settings)})

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(self.worker.start)
        try:
            yield
        finally:
            self.worker.stop()

    def app(self) -> Starlette:
        g = self.guarded
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/jobs", g(self.submit), methods=["POST"]),
            Route("/jobs/{job_id:int}", g(self.job), methods=["GET"]),
            Route("/jobs/{job_id:int}", g(self.cancel), methods=["DELETE"]),
            Route("/jobs/{job_id:int}/code", g(self.code), methods=["GET"]),
            Route("/jobs/{job_id:int}/events", g(self.events), methods=["GET"]),
            Route("/queue", g(self.queue), methods=["GET"]),
        ]
        return Starlette(routes=routes, lifespan=self.lifespan)
