"""What the parent trusts about a CPU candidate's timing: the wall-clock check weighs the loop against the
reference's own fills (never the fill total the candidate's process reports), a freeze that does not take
voids its pair, and a reference slowed beside the candidate is not paired with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, gains_nothing, relu_timing_case
from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.sandbox import cgroups
from evaluator.verdict.speed import CPU_DISTURBED, check_timing, report, usable
from evaluator.verdict.pacing import Pacer, Paired
from evaluator.statistics import summarize
from evaluator.verdict.wall_clock import _CPU_UNEXPLAINED, _WALL_SLACK_S, implausible
from reference_problems import resolve_problem

ADVERSARIAL = Path(__file__).parent / "adversarial"

# The same work as freeze_outlast.py without its thread: the honest speedup it is held to.
TWIN = '''import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, A, B):
        ext.relu(A[:1, :1])
        return torch.matmul(A, B)
'''

# 2 GiB faulted in by one mmap(MAP_POPULATE), over and over: ~0.66 s a call in the kernel, deaf to SIGSTOP.
POPULATE = """
import ctypes, mmap
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
while True:
    p = libc.mmap(None, 2 << 30, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x8000, -1, 0)
    libc.munmap(p, 2 << 30)
"""


def _loop_case(monkeypatch, fill_s_reported: float, reference_fill_ms: float):
    """relu's judge view on this CPU: 100 reps reporting 1 ms each in a 2 s loop, the child saying its fills
    took `fill_s_reported`, the reference's blocks beside it taking `reference_fill_ms` a rep beyond their
    samples by the parent's clock."""
    case = relu_timing_case([1.0] * 100, monkeypatch, device="cpu", size="small")
    case.result.messages[1].update(fill_s=fill_s_reported, _t=2.0)
    blocks = [[0.1] * 10] * 10
    case.paired = Paired(reference=blocks, candidate=[[1.0] * 10] * 10,
                         reference_wall_s=sum(map(sum, blocks)) / 1e3 + 100 * reference_fill_ms / 1e3)
    return case


def test_the_wall_clock_check_takes_the_fills_from_the_reference_not_the_candidate(monkeypatch):
    """The loop took 2 s, its calls report 0.1 s: a candidate that says its fills took the other 1.9 s is not
    believed when the reference's fills beside it took 5 ms a rep (0.5 s), and is when they took 18 ms."""
    forged = check_timing(_loop_case(monkeypatch, fill_s_reported=1.9, reference_fill_ms=5.0))
    assert forged.evidence.exploit == "timer_escape" and "went unreported" in forged.evidence.cause, forged.evidence
    assert check_timing(_loop_case(monkeypatch, fill_s_reported=0.0, reference_fill_ms=18.0)) is None


def test_hidden_time_beyond_the_margin_is_implausible():
    """The margin: what the loop took beyond the samples and the trusted fills may be _CPU_UNEXPLAINED of the
    loop plus _WALL_SLACK_S; just past it is flagged, just within it is not."""
    loop = 4.0
    allowed = _CPU_UNEXPLAINED * loop + _WALL_SLACK_S
    samples = [1.0] * 1000  # 1 s reported
    assert implausible(samples, loop, "cpu", fill_s=loop - 1.0 - allowed * 1.05)
    assert not implausible(samples, loop, "cpu", fill_s=loop - 1.0 - allowed * 0.95)
    assert not implausible(samples, loop, "cuda", fill_s=0.0)  # on CUDA the L2 flushes are not fills


def _frozen_hold():
    raise cgroups.FreezeIncomplete("1 thread(s) still running 0.2 s after SIGSTOP (7/8: D)")
    yield  # pragma: no cover - a generator, so contextmanager accepts it


def test_a_pair_whose_freeze_did_not_take_is_void_and_voids_the_ratio(monkeypatch):
    """Its reference block is not timed (it would run beside the candidate's threads), the rounds stop as
    early as they may, and the judge takes the speedup against the reference timed alone, saying why."""
    import contextlib

    timed = []
    pacer = Pacer(lambda first, reps: timed.append(first) or [1.0] * reps, rel_ci=0.5, max_reps=100)
    pacer.hold = contextlib.contextmanager(_frozen_hold)
    goes = [pacer({"event": "pace", "which": first, "reps": 10, "last_round": [0.5] * 10 if first else [],
                   "least": 20}).go for first in (0, 10, 20)]
    paired = pacer.paired
    assert goes == [True, True, False] and timed == [] and paired.reference == [] and paired.void == [0, 10]
    assert "still running" in paired.unfrozen
    samples = [0.5] * 20
    case = relu_timing_case(samples, monkeypatch, device="cpu", size="small")
    case.paired, case.ref.timing = paired, summarize([1.0] * 50, "perf_counter")
    assert not usable(case, samples)
    assert "could not be timed with the candidate stopped" in report(case).interval


@pytest.mark.parametrize("slower, stands", [(CPU_DISTURBED * 0.8, True), (CPU_DISTURBED * 1.3, False)])
def test_a_cpu_reference_slowed_beside_the_candidate_is_not_paired_with_it(monkeypatch, slower, stands):
    samples = [1.0] * 50
    case = relu_timing_case(samples, monkeypatch, device="cpu", size="small")
    case.ref.timing = summarize([1.0] * 50, "perf_counter")
    case.paired = Paired(reference=[[1.0 + slower] * 10] * 5, candidate=[[1.0] * 10] * 5)
    assert usable(case, samples) is stands
    assert ("slower beside the candidate" in report(case).interval) is not stands


@pytest.mark.parametrize("way", ["cgroup", "process group"])
def test_a_freeze_that_cannot_take_says_so_and_leaves_nothing_stopped(way):
    """A thread inside mmap(MAP_POPULATE) of 2 GiB takes its SIGSTOP only when the call returns (~0.66 s here):
    a freeze that comes with more than its wait (0.2 s) of the call left gives up, raises, and lets every
    process go on (none is left stopped); one that comes near the call's end takes."""
    cgroup, why = cgroups.for_child(64, 3072) if way == "cgroup" else (None, "")
    if way == "cgroup" and cgroup is None:
        pytest.skip(why)

    def join() -> None:
        for procs in cgroup.procs if cgroup else []:
            Path(procs).write_text("0")

    proc = subprocess.Popen([sys.executable, "-c", POPULATE], preexec_fn=join, start_new_session=True)
    raised = 0
    try:
        freeze = cgroup.freeze if cgroup else lambda frozen: cgroups.freeze_group(proc.pid, frozen)
        time.sleep(0.5)
        for _ in range(20):
            if raised == 2:
                break
            try:
                freeze(True)
                freeze(False)
            except cgroups.FreezeIncomplete as exc:
                assert "still running" in str(exc) or "had not taken" in str(exc)
                raised += 1
            time.sleep(0.05)
            state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert state not in "Tt", state
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if cgroup:
            cgroup.close()
    assert raised == 2, raised


@pytest.fixture(scope="module")
def trust_verdicts(adversarial_build_root, tmp_path_factory):
    """The two hostile candidates and their honest twins, in one batch: the timer wrapper on relu, the freeze
    outlaster on matmul at N=768 (10 ms calls here: a reference that time-shares its core with a busy thread is
    slowed only where its calls outlast the scheduler's slices)."""
    here = tmp_path_factory.mktemp("trust")
    problem = here / "matmul.py"
    problem.write_text((ROOT / "reference_problems" / "matmul.py").read_text().replace('"small": {"N": 256}', '"small": {"N": 768}'))
    (here / "matmul_twin.py").write_text(TWIN)
    relu, matmul = resolve_problem("relu"), resolve_problem(str(problem))
    jobs = [CandidateJob(path=ADVERSARIAL / "relu" / "timer_one_in_ten.py", problem=relu),
            CandidateJob(path=ADVERSARIAL / "relu" / "honest_captured.py", problem=relu),
            CandidateJob(path=ADVERSARIAL / "matmul" / "freeze_outlast.py", problem=matmul),
            CandidateJob(path=here / "matmul_twin.py", problem=matmul)]
    settings = EvalSettings(device="cpu", size="small", trials=3, warmup_ms=50, rep_ms=300, jobs=2,
                            build_root=adversarial_build_root, cpu_pairs=1)
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, settings)}


@pytest.mark.slow
def test_a_timer_that_reports_one_call_in_ten_gains_nothing(trust_verdicts):
    """Before: `correct`, 6.4x (its honest kernel: 0.022x), its forged fill total covering the loop. Its process
    holds no timer kforge reads."""
    gains_nothing(trust_verdicts["timer_one_in_ten"], trust_verdicts["honest_captured"])


@pytest.mark.slow
def test_threads_that_outlast_the_freeze_gain_nothing(trust_verdicts):
    """Its threads would run on while the reference is timed: caught, or no faster than its honest twin (the shared
    gains-nothing bound: 1.01x against its twin's 0.91x, under load, was this VM's spread, not a gain)."""
    gains_nothing(trust_verdicts["freeze_outlast"], trust_verdicts["matmul_twin"])


@pytest.mark.slow
def test_the_honest_candidates_beside_them_stay_correct(trust_verdicts):
    for name in ("honest_captured", "matmul_twin"):
        v = trust_verdicts[name]
        assert v.status is Status.CORRECT and v.speedup, v.evidence
