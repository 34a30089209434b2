"""A client of the service, over httpx: submit a job, read it (once, until finished, or as a stream of
server-sent events), see the queue, cancel; and RemoteBackend, judging.api's Backend over it, so a Judge (a
trainer's reward function) judges on a shared server as it would here. Answers are the service's own contracts;
a refusal, a server that cannot be reached, a job that ends without a verdict: one ServiceError, in one line.
A request the server refuses is an error; code it judged, however bad (invalid, syntax_error), is a verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import httpx

from judging.api import Judgment, Pair
from reference_problems import names_a_file
from service.contracts import CodeView, JobRequest, JobView, QueueView
from service.tokens import TokenFileError, read_tokens

CONNECT_S = 5.0  # a server that answers at all accepts a connection at once: an unreachable one is said soon
RATE_RETRIES = 5  # a rate limit's 429 is waited out (its Retry-After) this many times before it is the caller's


class ServiceError(RuntimeError):
    """The service refused or failed a request, or could not be reached: one line, its status code first where
    the server answered."""

    def __init__(self, why: str, status: int | None = None) -> None:
        super().__init__(f"{status}: {why}" if status else why)
        self.status = status


class OpenJobLimitReached(ServiceError):
    """The server's open-job limit: this client has as many jobs queued or running as it may. Its 429 has no
    Retry-After, which the rate limit's has: it lasts until some of the client's jobs finish, not for a time."""


def read_token(path: str | Path, client: str | None = None) -> str:
    """A client's token from a file in the server's tokens format (`CLIENT TOKEN` lines, readable by its owner
    alone: service.tokens, whose TokenFileError it raises), so the server's line for it can be handed over as it
    is: the named client's, or the file's only one. Never from the command line."""
    tokens = {name: token for token, name in read_tokens(Path(path)).items()}
    if client is None and len(tokens) == 1:
        return next(iter(tokens.values()))
    if client not in tokens:
        raise TokenFileError(f"{path} names no client {client!r}" if client else f"{path} names several clients: "
                             "say which (client=)")
    return tokens[client]


class ServiceClient:
    """One client (one token) of one server."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 60.0) -> None:
        self.base_url = base_url
        try:
            self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                                     timeout=httpx.Timeout(timeout_s, connect=CONNECT_S))
        except httpx.InvalidURL as exc:
            raise ServiceError(f"{base_url} is no URL: {exc}") from None

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, url: str, **kw) -> httpx.Response:
        """The server's answer, a rate limit's 429 waited out (a batch of jobs may pass the burst)."""
        reply = self._request(method, url, **kw)
        for _ in range(RATE_RETRIES):
            if reply.status_code != 429 or "Retry-After" not in reply.headers:
                break
            time.sleep(float(reply.headers.get("Retry-After", 1)))
            reply = self._request(method, url, **kw)
        return reply

    def _request(self, method: str, url: str, **kw) -> httpx.Response:
        """One request; a server that cannot be reached is a ServiceError (httpx's own exceptions stay inside)."""
        try:
            return self.http.request(method, url, **kw)
        except (httpx.RequestError, httpx.InvalidURL) as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: Exception) -> ServiceError:
        return ServiceError(f"cannot reach {self.base_url}: {str(exc) or type(exc).__name__}")

    def _call(self, method: str, url: str, **kw) -> dict:
        reply = self._send(method, url, **kw)
        if reply.is_error:
            raise _refusal(reply)
        try:
            return reply.json()
        except ValueError:
            raise ServiceError(f"{self.base_url} answered {reply.status_code}, not in JSON: is it a kforge serve?") \
                from None

    def submit(self, candidate: str, problem: str | None = None, problem_source: str | None = None,
               problem_name: str = "problem") -> JobView:
        """A job for the candidate against a registered problem, or against a problem file's text. The body is
        built unchecked: the server judges it, so a field that does not fit is its 422, one line naming the field,
        as every refusal is, not a local error of another kind."""
        body = JobRequest.model_construct(candidate=candidate, problem=problem, problem_source=problem_source,
                                          problem_name=problem_name)
        return JobView.model_validate(self._call("POST", "/jobs", content=body.model_dump_json(exclude_none=True),
                                                 headers={"Content-Type": "application/json"}))

    def job(self, job_id: int) -> JobView:
        return JobView.model_validate(self._call("GET", f"/jobs/{job_id}"))

    def code(self, job_id: int) -> CodeView:
        return CodeView.model_validate(self._call("GET", f"/jobs/{job_id}/code"))

    def cancel(self, job_id: int) -> JobView:
        return JobView.model_validate(self._call("DELETE", f"/jobs/{job_id}"))

    def queue(self) -> QueueView:
        return QueueView.model_validate(self._call("GET", "/queue"))

    def wait(self, job_id: int, every_s: float = 1.0, timeout_s: float = 3600.0) -> JobView:
        """Polls until the job is finished (done, failed or cancelled)."""
        deadline = time.monotonic() + timeout_s
        while not (job := self.job(job_id)).finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout_s:.0f} s")
            time.sleep(every_s)
        return job

    def events(self, job_id: int) -> Iterator[JobView]:
        """The job each time the server says it changed, until it is finished (server-sent events)."""
        try:
            with self.http.stream("GET", f"/jobs/{job_id}/events", timeout=httpx.Timeout(60.0, read=None)) as reply:
                if reply.is_error:
                    reply.read()
                    raise ServiceError(_why(reply), reply.status_code)
                for line in reply.iter_lines():
                    if line.startswith("data: "):
                        yield JobView.model_validate_json(line[len("data: "):])
        except httpx.RequestError as exc:
            raise self._unreachable(exc) from None


def _refusal(reply: httpx.Response) -> ServiceError:
    """The error a refused request raises: OpenJobLimitReached for the open-job limit (a 429 without Retry-After),
    so a caller can wait for its jobs rather than fail."""
    full = reply.status_code == 429 and "Retry-After" not in reply.headers
    return (OpenJobLimitReached if full else ServiceError)(_why(reply), reply.status_code)


def _why(reply: httpx.Response) -> str:
    """The server's one-line error, or the start of what else answered (a proxy's page) folded onto one line."""
    try:
        return json.loads(reply.content)["error"]
    except (ValueError, KeyError, TypeError):
        return " ".join(reply.text[:200].split())


def wait_bound_s(queue: QueueView, ids: set[int]) -> float:
    """The longest the server may take to finish these jobs of this client's: each batch the worker takes holds
    the queue's head, so a job at place p is taken within p batches, after the one running now."""
    places = [job.position or 0 for job in queue.jobs if job.id in ids]
    return (bool(queue.running) + max(places, default=0)) * queue.batch_bound_s


def problem_fields(problem: str) -> dict[str, str]:
    """A Pair's problem as a job names it: a registered name as it is; a problem file's path (names_a_file, as
    resolve_problem tells them apart) sent as the file's text, since the server cannot read this machine's files."""
    if not names_a_file(problem):
        return {"problem": problem}
    try:
        return {"problem_source": Path(problem).read_text(), "problem_name": Path(problem).stem}
    except OSError as exc:
        raise ServiceError(f"cannot read problem file {problem}: {exc.strerror}") from None


class RemoteBackend:
    """judging.api's Backend on a `kforge serve`: `Judge(backend=RemoteBackend(url, token))`, or token_file= (the
    server's tokens format; client= picks a line). One call's pairs are submitted as jobs (identical pairs as one),
    all of them waited for by polling the queue (one request a poll, however many jobs), and answered in the pairs'
    order with the verdicts the server stored. The wait is bounded by the server's own bound on its batches and
    the jobs' places, so a stalled server is an error, a long queue is not. A call with more pairs than the
    server's open-job limit leaves room for is not refused: a trainer's batch is its batch, so each pair past
    the limit is sent again once one of this client's jobs finishes, that wait bounded the same way. Code that is
    no candidate gets its verdict (invalid, syntax_error) as from LocalBackend; a pair the server refuses (a 422:
    a problem it cannot judge, a field that does not fit its contract) is a ServiceError naming the field."""

    def __init__(self, url: str, token: str | None = None, *, token_file: str | Path | None = None,
                 client: str | None = None, poll_s: float = 1.0) -> None:
        if (token is None) == (token_file is None):
            raise TypeError("RemoteBackend takes a token or a token_file, one of them")
        self.api = ServiceClient(url, token or read_token(token_file, client))
        self.poll_s = poll_s

    def close(self) -> None:
        self.api.close()

    def judge(self, pairs: list[Pair]) -> list[Judgment]:
        keys = [(pair.problem, pair.code) for pair in pairs]
        sent = {key: self._submit(*key) for key in dict.fromkeys(keys)}
        finished = self._finished(list(sent.values()))
        return [_judgment(sent[key], finished[sent[key].id]) for key in keys]

    def _submit(self, problem: str, code: str) -> JobView:
        """The pair's job, sent again each time one of this client's open jobs finishes while the server says
        the client is at its open-job limit."""
        while True:
            try:
                return self.api.submit(code, **problem_fields(problem))
            except OpenJobLimitReached:
                queue = self.api.queue()
                mine = {job.id for job in queue.jobs}
                self._wait(queue, mine, leaving=min(1, len(mine)))

    def _finished(self, jobs: list[JobView]) -> dict[int, JobView]:
        """Every job as it ended, read once it left this client's open jobs."""
        waiting = {job.id for job in jobs if not job.finished}
        self._wait(self.api.queue(), waiting, leaving=len(waiting))
        return {job.id: self.api.job(job.id) if job.id in waiting else job for job in jobs}

    def _wait(self, queue: QueueView, waiting: set[int], leaving: int) -> None:
        """Polls the queue (one request a poll) until `leaving` of these jobs have left this client's open jobs,
        at most as long as the server's batches allow for them: a stalled server is the ServiceError."""
        bound_s = wait_bound_s(queue, waiting)
        deadline = time.monotonic() + bound_s
        while len(waiting & {job.id for job in queue.jobs}) > len(waiting) - leaving:
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.api.base_url}: jobs {sorted(waiting)} unfinished after {bound_s:.0f} s, "
                                   "longer than the server's batches allow: is its worker stalled?")
            time.sleep(self.poll_s)
            queue = self.api.queue()


def _judgment(sent: JobView, job: JobView) -> Judgment:
    """The job's answer as LocalBackend gives it: taken back where the job was finished before this call sent it,
    or its verdict was stored before the worker took it."""
    if job.state != "done" or job.verdict is None:
        raise ServiceError(f"job {job.id} ({job.problem}) {job.state}" + (f": {job.error}" if job.error else ""))
    return Judgment(verdict=job.verdict, evaluation_id=job.evaluation_id, reused=job.reused or sent.finished)
