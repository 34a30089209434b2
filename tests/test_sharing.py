"""Untimed stages shared, timed stages alone (evaluator/parent/sharing.py), on CPU with real jailed children: two
candidates' untimed stages run at once, every process of a sharer stands still while anything is timed on its
device, and a candidate that fails while sharing is judged again alone."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import pytest

from conftest import CANDIDATES, SOLUTIONS
from evaluator import CandidateJob, Status, evaluate
from evaluator.parent.sharing import Sharing
from reference_problems import resolve_problem

PROBLEM = "scale_bias_hardswish"
FROZEN = re.compile(r"timed, \d+ children of sharers frozen: \[([\d, ]+)\]")


class FreezeWatch(logging.Handler):
    """While the log says sharers' children are frozen for a timed section, samples every thread of theirs until
    the section says it is done (said before they are let go): any thread seen running is recorded."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.sections, self.running, self.admitted = 0, [], []
        self._stop: threading.Event | None = None
        self._sampler: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "runs untimed beside its holder" in message:
            self.admitted.append(message)
        if found := FROZEN.search(message):
            self.sections += 1
            self._stop = threading.Event()
            pids = [int(pid) for pid in found.group(1).split(",")]
            self._sampler = threading.Thread(target=self._sample, args=(pids, self._stop), daemon=True)
            self._sampler.start()
        elif message.endswith("timed, done") and self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self._sampler = None

    def _sample(self, pids: list[int], stop: threading.Event) -> None:
        while not stop.wait(0.002):
            for pid in pids:
                for task in Path(f"/proc/{pid}/task").glob("*"):
                    try:
                        state = (task / "stat").read_text().rsplit(") ", 1)[1][0]
                    except (OSError, IndexError):
                        continue
                    if state not in "TtZX":
                        self.running.append((pid, task.name, state))


@pytest.fixture
def watch():
    handler = FreezeWatch()
    logger = logging.getLogger("evaluator.parent.sharing")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def _judge(settings, paths: list[Path]) -> dict[str, object]:
    problem = resolve_problem(PROBLEM)
    verdicts = evaluate([CandidateJob(path=path, problem=problem) for path in paths],
                        settings.model_copy(update={"untimed_share": 2}))
    return {Path(v.solution_path).name: v for v in verdicts}


def test_two_candidates_untimed_stages_run_at_once_and_neither_is_timed_beside_the_other(cpu_settings, watch):
    """The second candidate is admitted beside the first as soon as both are compiled; whatever is timed while it
    shares (the problem's reference, the first candidate) finds every thread of its children stopped, and both
    are judged as alone: correct, the identical candidate near 1x."""
    verdicts = _judge(cpu_settings, [SOLUTIONS / PROBLEM / "cpu_fused_o3.py", CANDIDATES / PROBLEM / "same_as_reference.py"])
    assert [v.status for v in verdicts.values()] == [Status.CORRECT] * 2, {n: v.evidence.cause for n, v in verdicts.items()}
    shared = [v for v in verdicts.values() if v.evidence.beside_s]
    assert len(watch.admitted) == 1 and len(shared) == 1 and not shared[0].evidence.rejudged_alone
    assert watch.sections >= 1 and watch.running == [], watch.running
    assert 0.6 <= verdicts["same_as_reference.py"].speedup <= 1.4, verdicts["same_as_reference.py"].evidence.cause


def test_a_candidate_that_fails_while_sharing_is_judged_again_alone(cpu_settings, watch):
    """Whichever of two failing candidates shared its device is run once more, alone, and that run's verdict is
    the one returned, saying what it was beside the other; the one that held the device throughout is not."""
    verdicts = _judge(cpu_settings, [SOLUTIONS / PROBLEM / "cpu_wrong.py", SOLUTIONS / PROBLEM / "cpu_runtime_error.py"])
    assert {n: v.status for n, v in verdicts.items()} == {"cpu_wrong.py": Status.INCORRECT,
                                                          "cpu_runtime_error.py": Status.RUNTIME_ERROR}
    again = [v for v in verdicts.values() if v.evidence.rejudged_alone]
    assert len(again) == 1 and again[0].evidence.beside_s is not None
    assert again[0].evidence.notes[-1].startswith(f"judged again alone: beside another candidate it was {again[0].status.value}")
    assert [v.evidence.beside_s for v in verdicts.values() if not v.evidence.rejudged_alone] == [None]


class _Still:
    """A stand-in child for Sharing's own bookkeeping: records freezes and thaws."""

    def __init__(self):
        self.proc, self.pid, self.frozen, self.excused_s = self, 1, 0, 0.0

    def poll(self):
        return None

    def freeze(self) -> None:
        self.frozen += 1

    def thaw(self, frozen_s: float) -> None:
        self.frozen -= 1
        self.excused_s += frozen_s


def test_a_timed_section_waits_for_a_sharers_request_and_holds_the_next_one():
    """A comparison a sharer asked for finishes before a timed section freezes it; one asked during the section
    waits until the section ends; no sharer is admitted while something is timed; frozen time is excused."""
    sharing, child = Sharing(3), _Still()
    sharer = sharing.admit("0", "a.py")
    sharing.adopt(sharer, child)
    order: list[str] = []
    inside = threading.Event()

    def request(hold_s: float, said: str) -> None:
        with sharing.request(sharer):
            inside.set()
            threading.Event().wait(hold_s)
            order.append(said)

    threading.Thread(target=request, args=(0.2, "request done")).start()
    inside.wait(5)
    resume = sharing.pause("0", "c.py")
    order.append("timed")
    assert child.frozen == 1
    late = threading.Thread(target=request, args=(0.0, "late request"))
    late.start()
    late.join(0.3)
    assert late.is_alive() and sharing.admit("0", "b.py") is None
    resume()
    late.join(5)
    assert order == ["request done", "timed", "late request"] and child.frozen == 0 and child.excused_s > 0.25
    assert sharing.admit("0", "b.py") is not None and sharing.admit("0", "d.py") is None  # two beside the holder
