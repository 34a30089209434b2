"""A client of the service, over httpx: submit a job, read it (once, until finished, or as a stream of
server-sent events), see the queue, cancel. Answers are the service's own contracts; a refusal raises ServiceError
with the server's one line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import httpx

from service.contracts import CodeView, JobRequest, JobView, QueueView


class ServiceError(RuntimeError):
    """The service refused or failed a request: its status code and its one line."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(f"{status}: {why}")
        self.status = status


def read_token(path: Path) -> str:
    """A client's token, from a file of its own (its only line), never from the command line."""
    return path.read_text().strip()


class ServiceClient:
    """One client (one token) of one server."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 60.0) -> None:
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, url: str, **kw) -> dict:
        reply = self.http.request(method, url, **kw)
        if reply.is_error:
            raise ServiceError(reply.status_code, _why(reply))
        return reply.json()

    def submit(self, candidate: str, problem: str | None = None, problem_source: str | None = None,
               problem_name: str = "problem") -> JobView:
        """A job for the candidate against a registered problem, or against a problem file's text."""
        body = JobRequest(candidate=candidate, problem=problem, problem_source=problem_source, problem_name=problem_name)
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
        with self.http.stream("GET", f"/jobs/{job_id}/events", timeout=httpx.Timeout(60.0, read=None)) as reply:
            if reply.is_error:
                reply.read()
                raise ServiceError(reply.status_code, _why(reply))
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    yield JobView.model_validate_json(line[len("data: "):])


def _why(reply: httpx.Response) -> str:
    try:
        return json.loads(reply.content)["error"]
    except (ValueError, KeyError, TypeError):
        return reply.text[:200]
