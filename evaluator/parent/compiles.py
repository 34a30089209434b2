"""The compile side of a batch: a candidate prepared (static checks, its bytes in its disk), compiled once per
build key in a jailed compile child (or answered from what the cache recorded), and its scratch removed after.

A candidate's dir, `candNNNNN`, is its disk (Batch.new_disk, evaluator/sandbox/disk.py), which holds what all its
children write:
  src/         its bytes, written by the parent (read-only to its children)
  compile/     the compile child's scratch (its HOME and TMPDIR, its log); compile.view/ its layer of the cache
  candNNNNN/   the candidate child's scratch (Prepared.workdir: its log, the outputs it hands over on CPU in out/);
               candNNNNN.view/ its layer of the cache"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pydantic import BaseModel

from evaluator.contracts import CandidateJob, Evidence, Status, Verdict
from evaluator.parent import buildcache
from evaluator.parent.batch import Batch, build_key
from evaluator.sandbox import disk
from evaluator.sandbox.results import ChildResult
from evaluator.sandbox.spawn import LOG
from evaluator.static import check_source
from evaluator.verdict.case import Outcome
from evaluator.verdict.rules import ended_badly

_log = logging.getLogger(__name__)


class Prepared(BaseModel):
    job: CandidateJob
    build_dir: Path
    workdir: Path  # the candidate child's scratch, in the candidate's disk
    run: int = 0  # which run of it this is: one that failed while sharing is run again alone (runner.py)

    @property
    def candidate(self) -> Path:
        """The job's bytes, written into its disk by the parent: what its children import and judge."""
        return self.workdir.parent / "src" / self.job.path.name


def prepare(batch: Batch, job: CandidateJob, index: int) -> Prepared | Verdict:
    """Static checks first: a truncated, non-Python or GPU-only candidate costs no compile. The rest get the job's
    bytes in their scratch: the file itself is not read again."""
    settings = batch.settings
    check = check_source(job.text, settings.language)
    if check.status:
        return Verdict.of(job, settings, check.status, evidence=Evidence(stage="parse", cause=check.cause))
    if check.kernel_free:
        return Verdict.of(job, settings, Status.CHEAT, evidence=Evidence(
            stage="parse", exploit="no_custom_kernel", cause="cheat: no kernel of its own: the file defines, builds "
            "and loads none (no load_inline, Triton, CuTe or TileLang kernel; it imports only torch and pure-Python "
            "modules), so forward() can run only PyTorch ops; read from the code before anything ran"))
    if check.needs_cuda and settings.device != "cuda":
        return Verdict.of(job, settings, Status.SKIPPED,
                        evidence=Evidence(stage="parse", cause="skipped: no CUDA device (the candidate builds or uses CUDA code)"))
    if check.cpu_only and settings.device == "cuda":
        return Verdict.of(job, settings, Status.SKIPPED,
                        evidence=Evidence(stage="parse", cause="skipped: CPU-only extension (load_inline without cuda_sources); use --device cpu"))
    own = batch.new_disk(batch.root / f"cand{index:05d}")
    prep = Prepared(job=job, build_dir=batch.build_root / build_key(job.text, settings.device), workdir=own / own.name)
    prep.candidate.parent.mkdir()
    prep.candidate.write_bytes(job.source)
    return prep


def compile_once(batch: Batch, prep: Prepared) -> ChildResult:
    """A compile child, unless the key's compile ended before (buildcache.CompileRecord): a compiler error comes back
    from what the parent kept, and a finished build is loaded by the candidate child as it is, which saves a
    process and a torch import (seconds) per candidate on a warm run. The compile child builds in its view of
    the cache; the build is published (and recorded) only when it ended well. One compile of a key at a time
    (buildcache.compiling): a second waits and reads the first's record."""
    with buildcache.compiling(batch.build_root, prep.build_dir):
        memo = buildcache.CompileRecord(batch.build_root, prep.build_dir)
        if (failure := memo.failure()) is not None:
            return failure
        if memo.was_built():
            return _already_built(prep)
        return _compile_child(batch, prep, memo)


def _compile_child(batch: Batch, prep: Prepared, memo: buildcache.CompileRecord) -> ChildResult:
    if batch.headers is not None:  # CUDA: later compiles take the .gch; this one goes on without (main.o is
        batch.headers.submit(_prepare_headers, batch, prep)  # built beside the .cu, off its critical path)
    else:  # CPU: nothing may compile while a candidate is timed
        _prepare_headers(batch, prep)
    workdir = prep.workdir.parent / "compile"
    result = batch.run("compile", prep.job.problem, workdir, prep.build_dir, prep.candidate)
    outcome = _ended_badly(batch, result)
    if outcome is None and _published(workdir, prep):
        memo.record_built()
    elif outcome is not None and outcome.status is Status.COMPILE_ERROR and not result.cancelled:
        memo.record_failure(result)
    clear(workdir)
    return result


def _prepare_headers(batch: Batch, prep: Prepared) -> None:
    """The precompiled headers the job's load_inline calls will want, built and published (buildcache)."""
    scratch = batch.root / "pch" / prep.workdir.name
    said = buildcache.prepare_headers(prep.job.text, batch.build_root, scratch, batch.tool(scratch))
    _log.info("precompiled headers for %s: %s", prep.job.path, "; ".join(said) or "none wanted")
    for failed in (s for s in said if "build failed" in s):  # said once per flag set: later compiles read "failed before"
        _log.warning("the precompiled torch header could not be built (%s); main.cpp compiles without it, ~10 s slower each",
                     failed)


def _ended_badly(batch: Batch, result: ChildResult) -> Outcome | None:
    """How a compile child ended if not well: the budget the parent stopped it at, else as the judge reads it."""
    if result.over:
        return Outcome(result.over.status, Evidence(stage=result.stage, cause=result.over.cause,
                                                    log_tail=result.log_tail(2000)))
    return ended_badly(result, batch.settings.limits.timeout_s, 0)


def clear(workdir: Path) -> None:
    """A compile child's scratch and its view of the cache, removed once it ended (its build published first):
    what it wrote holds its candidate's disk no longer than the child, leaving the room to the candidate child. Its
    log stays."""
    for path in [*(p for p in workdir.iterdir() if p.name != LOG), buildcache.view_dir(workdir)]:
        disk.remove(path)


def free(workdir: Path) -> None:
    """A candidate's files, once its verdict is made (`workdir`: Prepared.workdir): its disk released with all its
    children wrote, their logs included."""
    disk.release(workdir.parent)


def _published(workdir: Path, prep: Prepared) -> bool:
    """The compile child's build, moved into the cache; if that fails the candidate child builds it again in its
    own view (slower, never wrong), and the key is not recorded as built."""
    try:
        buildcache.publish(workdir, prep.build_dir)
        return True
    except OSError as exc:
        _log.warning("could not publish the build of %s: %s", prep.job.path, exc)
        return False


def _already_built(prep: Prepared) -> ChildResult:
    """What a compile child that found the build in place reports, without starting one."""
    now = time.monotonic()
    messages = [{"event": "compiled", "seconds": 0.0, "cache_hit": True, "steps": {}, "_t": now}, {"event": "done", "_t": now}]
    return ChildResult(messages=messages, returncode=0, started=now, log_path=prep.workdir.parent / "compile" / LOG)


def compile_failure(batch: Batch, prep: Prepared, compiled: ChildResult) -> Verdict | None:
    """A failed compile is judged at once and waits for no device; its candidate's files are freed with it."""
    failed = _ended_badly(batch, compiled)
    if failed is None:
        return None
    free(prep.workdir)
    return Verdict.of(prep.job, batch.settings, failed.status, evidence=failed.evidence)
