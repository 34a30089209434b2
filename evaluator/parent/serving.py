"""A candidate's forward server timed by the parent (evaluator.parent.trusted_timing): where its exchanges lie,
its reference's own forward server, and what the parent does once the candidate says it is serving."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from evaluator import exchange
from evaluator.parent.batch import Batch
from evaluator.parent.compiles import Prepared
from evaluator.parent.hold import Hold
from evaluator.parent.references import ReferenceServer, exchanges, run_budget_s
from evaluator.parent.trusted_timing import REFERENCE, TrustedTiming
from evaluator.protocol import Arm
from evaluator.sandbox.spawn import Child
from evaluator.verdict.checks import Checks
from evaluator.verdict.pacing import Pacer

_log = logging.getLogger(__name__)


def exchange_of(batch: Batch, prep: Prepared, gpu: str | None, pair: int) -> tuple[Path, str] | None:
    """Where the candidate's forward exchange for process pair `pair` lies (its comparer's folder, its name there),
    where the parent times it (Batch.trusted_timing). Each run has names of its own: the comparer keeps the layout
    of every exchange it filled."""
    if not batch.trusted_timing():
        return None
    return exchanges(batch, prep.job.problem, gpu, pair), f"{prep.workdir.name}-{pair}" + (f"-{prep.run}" if prep.run else "")


def reference_server(batch: Batch, prep: Prepared, gpu: str | None, pair: int, hold: Hold) -> Child:
    """The problem's reference as a forward server, in a fresh child of its own beside the candidate's (started
    now, while the candidate runs its untimed stages), with its exchange in the same folder: both sides are then
    timed in a process that did not fill its inputs. Served by the comparer itself, whose last act before each call
    was writing them, an identical candidate timed 0.84-0.93x its reference with a core hogged."""
    folder, name = exchange_of(batch, prep, gpu, pair)
    inputs = exchange.create(folder, f"{name}-{REFERENCE}")
    workdir = folder.parent / "serve" / name
    child = hold.spawned(lambda: batch.spawn(workdir, workdir / "build", prep.job.problem, gpu=gpu, exchange=inputs))
    child.begin(batch.request("serve", prep.job.problem, workdir / "out", exchange=str(inputs)))
    return child


def served(batch: Batch, prep: Prepared, server: ReferenceServer, child: Child, reference: Child, pair: int,
           pacer: Pacer, checks: Checks, comparisons: dict[str, dict], take: Hold) -> Callable[[], None]:
    """What the parent does when the candidate's child says it is serving: takes its device if it only shared it,
    times it (evaluator.parent.trusted_timing) beside its reference's server with every sharer of the device
    frozen, then has the comparer judge the calls it drew and the verify call, from its own reads. A reference
    server that never served is kforge's failure, not the candidate's."""
    def untimed(why: str) -> None:
        """kforge's own failure: every call it drew and did not compare, and the verify call, carry it (never a
        call 'not handed over', which would be the candidate's)."""
        checks.asked.append("verify")
        for label in checks.asked:
            comparisons.setdefault(label, {"error": why, "comparer_died": True})
        child.send(Arm(end=True))

    def serve() -> None:
        try:
            timed()
        except Exception as exc:  # kforge's own failure: said, and the candidate told to end, not left waiting
            _log.exception("timing a forward server failed")
            untimed(f"kforge failed timing the forward server: {type(exc).__name__}: {exc}")

    def timed() -> None:
        folder, name = exchange_of(batch, prep, server.gpu, pair)
        serving = reference.wait_for("serving", timeout_s=run_budget_s(batch.settings, server.reference))
        if serving is None:
            reference.finish(wait=False)
            return untimed(f"the reference's forward server did not start: "
                           f"{reference.result.log_tail(300).strip() or 'no log'}")
        gpu = take(server.gpu)
        batch.settle(gpu)
        comparer = server.live()  # one killed in the candidate's trials is replaced first
        if isinstance(comparer, str):
            return untimed(comparer)
        timer = TrustedTiming(comparer, child, reference, folder, name, batch.settings,
                              batch.settings.rep_ms / batch.pairs(), cores=batch.cores[1])
        timer.done.paired = pacer.paired  # one record: a pace the candidate forged is named there too
        with batch.sharing.timed(gpu, prep.job.path.name):
            done = timer.run(child.paused)
        pacer.paired.timing, pacer.ended = done.timing, True
        checks.asked += [*done.asked, *(["verify"] if "verify" in done.snapshots else [])]
        for label, (metas, path) in done.snapshots.items():  # path None: the comparer kept the snapshot (CUDA)
            comparisons[label] = server.compare(label, label, -1, metas, path, kept=None if path else name)
            if path is not None:
                path.unlink(missing_ok=True)
        timer.forget()
        if done.failed and child.proc.poll() is None:  # it lives, yet its calls could not be timed or read
            comparisons["verify"] = {"error": done.failed}
            checks.asked.append("verify")
    return serve
