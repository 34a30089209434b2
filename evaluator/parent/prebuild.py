"""Compiles started before a candidate is judged: an agent's answer is compiled the moment it arrives, while the
answers before it are still being judged, so the batch that later judges it finds its build in the cache (or
its compile error recorded) instead of waiting ~10 s for a compile child.

The compile is the one evaluate() runs (runner.compile_once: the same jailed compile child, published to the
same build cache, one compile per key at a time), so what is judged does not change; only when the compiler
runs. Nothing here judges or stores. Static failures compile nothing; their verdicts come from the batch.
On CPU the caller should not use it while candidates are timed: a batch keeps its compilers off the timing
cores and finishes them before any timed run."""

from __future__ import annotations

import itertools
import logging
import shutil
from concurrent.futures import Future, ThreadPoolExecutor

from evaluator.contracts import CandidateJob, EvalSettings, Verdict
from evaluator.parent import buildcache
from evaluator.parent.batch import Batch
from evaluator.parent.runner import compile_once, prepare

_log = logging.getLogger(__name__)


class Prebuilder:
    """Compiles submitted jobs in the background, as many at once as a batch would (Batch.compile_slots). Its
    batch (scratch, jail probe) is made at the first job; close() stops running compile children."""

    def __init__(self, settings: EvalSettings):
        self.settings = settings
        self._batch: Batch | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._count = itertools.count()

    def submit(self, job: CandidateJob) -> Future:
        if self._batch is None:
            self._batch = Batch(self.settings)
            self._pool = ThreadPoolExecutor(max_workers=self._batch.compile_slots, thread_name_prefix="kforge-prebuild")
        return self._pool.submit(self._build, self._batch, job, next(self._count))

    @staticmethod
    def _build(batch: Batch, job: CandidateJob, index: int) -> str:
        """What the cache now knows of the job's build: "built", "failed" (a compile error, kept), "static"
        (nothing to compile), or "not recorded" (stopped, timed out: the batch compiles it again)."""
        prep = prepare(batch, job, index)
        if isinstance(prep, Verdict):
            return "static"
        try:
            compile_once(batch, prep)
        finally:
            shutil.rmtree(prep.workdir, ignore_errors=True)
        record = buildcache.CompileRecord(batch.build_root, prep.build_dir)
        said = "built" if record.was_built() else "failed" if record.failure() is not None else "not recorded"
        _log.info("compiled on arrival: %s (%s)", job.path, said)
        return said

    def close(self) -> None:
        if self._batch is None:
            return
        self._batch.stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self._batch.root, ignore_errors=True)

    def __enter__(self) -> "Prebuilder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
