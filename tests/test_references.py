"""Each problem's reference: opened lazily, held in its own child (the comparer), bounded in number, closed when its
last candidate is judged; one that fails ends only its own problem's candidates."""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
from pathlib import Path

import pytest
import torch

from conftest import SOLUTIONS
from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.references import OpenProblems, ReferenceServer, _RESIDENT_SHARE
from evaluator.batch import Batch
from reference_problems import resolve_problem

HUNGRY = Path(__file__).parent / "problems" / "hungry.py"


def test_a_failing_reference_fails_only_its_problem(cpu_settings):
    """Mid-batch, one problem's reference exceeds its memory limit: its candidate gets `reference_error` with the
    cause in words, and the other problems' candidates are still judged."""
    good = resolve_problem("scale_bias_hardswish")
    jobs = [CandidateJob(path=SOLUTIONS / "scale_bias_hardswish" / "cpu_fused_o3.py", problem=good),
            CandidateJob(path=SOLUTIONS / "scale_bias_hardswish" / "cpu_wrong.py", problem=resolve_problem(str(HUNGRY))),
            CandidateJob(path=SOLUTIONS / "scale_bias_hardswish" / "cpu_wrong.py", problem=good)]
    settings = cpu_settings.model_copy(update={"limits": cpu_settings.limits.model_copy(update={"memory_mb": 4096})})
    verdicts = list(evaluate(jobs, settings))
    by = {(v.problem, Path(v.solution_path).stem): v for v in verdicts}
    failed = by[("hungry", "cpu_wrong")]
    assert failed.status is Status.REFERENCE_ERROR
    assert "reference of 'hungry' failed" in failed.evidence.cause and "allocate memory" in failed.evidence.cause, failed.evidence.cause
    assert by[("scale_bias_hardswish", "cpu_fused_o3")].status is Status.CORRECT
    assert by[("scale_bias_hardswish", "cpu_wrong")].status is Status.INCORRECT


def test_expected_outputs_never_leave_the_reference_child(cpu_settings):
    """The reference keeps its outputs in its own memory and compares there: a watcher listing every file of the
    batch while it runs and serves sees only its log (and tempfile's probe of TMPDIR); a comparison of a file nobody wrote is an error, not a crash."""
    batch, seen, done = Batch(cpu_settings), set(), threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):  # a folder removed while it is listed
                seen.update(p.name for p in batch.root.rglob("*") if p.is_file())

    watcher = threading.Thread(target=watch)
    watcher.start()
    server = ReferenceServer(batch, resolve_problem("softmax"))
    try:
        ref = server.ready(lambda want=None: None)
        answer = server.compare("trial_0", "trial_0", 0, ref.meta["trial_0"], batch.root / "nowhere.out")
    finally:
        done.set()
        watcher.join()
        server.close()
        shutil.rmtree(batch.root)
    assert set(ref.meta) == {"trial_0", "trial_1", "trial_2", "timing", "verify"} and ref.timing is not None
    assert answer["error"].startswith("FileNotFoundError")
    # besides its log, at most the 8-letter file Python's tempfile writes ("blat") and unlinks to probe TMPDIR
    assert all(re.fullmatch(r"[a-z0-9_]{8}", name) for name in seen - {"child.log"}), seen
    assert server.child.result.returncode == 0  # closed on request, not killed


def test_open_problems_are_bounded_by_the_memory_their_comparers_hold(cpu_settings):
    """The first problem always opens; more open while their comparers fit the device's share; a problem whose
    last candidate is judged closes and makes room."""
    batch = Batch(cpu_settings)
    a, b, c = (resolve_problem(n) for n in ("relu", "softmax", "matmul"))
    problems = OpenProblems(batch, [a, b, c])
    try:
        assert problems.admissible(a)
        problems.server(a)
        assert problems.admissible(b)  # one pending comparer (its resident budget) + one more still fit
        problems.server(b)
        assert not problems.admissible(c) and problems.admissible(a)
        problems.finished_one(a)
        assert problems.admissible(c) and a.sha256 not in problems.servers
        assert _RESIDENT_SHARE < 0.5
    finally:
        problems.close_all()
        shutil.rmtree(batch.root)


def test_a_problem_is_expected_to_hold_what_one_call_moves_beside_its_resident_outputs(cpu_settings):
    """Before its reference ran, a problem counts its resident budget plus one call's bytes (measured on the meta
    device by evaluator.costs): a second problem that fits beside a first on the budget alone does not open
    beside it when its call moves a fifth of the device; unmeasured, it counts the budget alone."""
    batch = Batch(cpu_settings)
    a, b = resolve_problem("relu"), resolve_problem("softmax")
    for big, opens in ((None, True), (0.2, False)):
        problems = OpenProblems(batch, [a, b], sizes=lambda p: int(big * problems._memory) if big and p is b else None)
        try:
            assert problems.held() == "none"
            problems.server(a)
            assert problems.admissible(b) is opens
            assert problems.held() == f"relu {problems._expected(a) / 1e9:.1f} GB expected"  # an out-of-memory's evidence
        finally:
            problems.close_all()
    shutil.rmtree(batch.root)


def test_spare_reference_children_start_ahead_bounded_and_are_taken_or_ended(cpu_settings):
    """Problems waiting to open get their reference child started early (on CUDA the dispatcher asks; the child
    holds no device memory until its request), at most _SPARES_PER_DEVICE; a problem that opens takes its spare
    (the same process, which then serves), and close_all ends the spares nobody took."""
    from evaluator.references import _SPARES_PER_DEVICE

    batch = Batch(cpu_settings)
    a, b, c = (resolve_problem(n) for n in ("relu", "softmax", "matmul"))
    problems = OpenProblems(batch, [a, b, c])
    try:
        problems.spare([a, a, b, c])
        assert list(problems.spares) == [a.sha256, b.sha256][:_SPARES_PER_DEVICE]
        spare = problems.spares[a.sha256]
        server = problems.server(a)
        assert server.child is spare and a.sha256 not in problems.spares
        problems.spare([a, c])  # a is open: only c gets one
        assert set(problems.spares) == {b.sha256, c.sha256}
        left = list(problems.spares.values())
        ref = server.ready(lambda want=None: None)
        assert ref.meta and spare.proc.poll() is None  # the spare became the comparer
    finally:
        problems.close_all()
        shutil.rmtree(batch.root)
    assert all(child.proc.poll() is not None for child in [spare, *left]) and not problems.spares


def test_a_spare_whose_problem_has_no_candidate_left_is_ended(cpu_settings):
    """A problem's candidates may all fail to compile after its spare started (spares start beside the compiles):
    its last one ends the spare, which would otherwise hold a slot until the batch ends."""
    batch = Batch(cpu_settings)
    a, b = (resolve_problem(n) for n in ("relu", "softmax"))
    problems = OpenProblems(batch, [a, b])
    try:
        problems.spare([a])
        child = problems.spares[a.sha256]
        problems.finished_one(a)  # its only candidate did not compile
        assert a.sha256 not in problems.spares
        assert child.proc.wait(timeout=60) is not None
    finally:
        problems.close_all()
        shutil.rmtree(batch.root)


def test_the_dispatcher_asks_spares_for_compiled_problems_then_those_still_compiling():
    """On CUDA the first references start beside the compiles: the first candidate compiled no longer waits
    ~7 s for its reference's interpreter and torch (seeds + repairs cold, H100)."""
    from types import SimpleNamespace

    from evaluator.dispatch import Dispatcher

    asked: list[str] = []
    problems = SimpleNamespace(servers={}, spare=asked.extend, admissible=lambda problem: False, placed={},
                               gpu_of=lambda problem: "0")
    batch = SimpleNamespace(settings=SimpleNamespace(device="cuda"), gpus=["0"])
    dispatch = Dispatcher(batch, problems, runners=None, judge_one=None)
    job = lambda name: SimpleNamespace(job=SimpleNamespace(problem=resolve_problem(name)))  # noqa: E731
    dispatch.ready, dispatch.compiling = [(job("matmul"), None)], [job("relu"), job("softmax")]
    assert dispatch.admit() == set() and [p.name for p in asked] == ["matmul", "relu", "softmax"]


def test_the_dispatcher_keeps_candidates_loading_while_one_holds_the_device():
    """On CUDA IN_FLIGHT candidates per device (one running, two ready to take it: children forked in ~0.05 s,
    stop 26; with 4.5 s interpreter starts it took four, stop 24); on CPU two."""
    import itertools
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from evaluator.dispatch import IN_FLIGHT, Dispatcher

    release, judged = threading.Event(), []

    def judge_one(prep, compiled, child):
        judged.append(prep)
        release.wait(30)

    server = SimpleNamespace(prestart=lambda: None)
    job = SimpleNamespace(job=SimpleNamespace(problem=resolve_problem("relu")))
    for device, gpus, expected in (("cuda", ["0", "1"], 2 * IN_FLIGHT), ("cpu", [None], 2)):
        turn = itertools.cycle(gpus)  # each candidate placed anew: one per device in turn
        problems = SimpleNamespace(servers={}, spare=lambda waiting: None, admissible=lambda problem: True,
                                   server=lambda problem: server, placed={}, gpu_of=lambda problem: next(turn))
        batch = SimpleNamespace(settings=SimpleNamespace(device=device), gpus=gpus)
        with ThreadPoolExecutor(max_workers=2 * IN_FLIGHT) as runners:
            dispatch = Dispatcher(batch, problems, runners, judge_one)
            dispatch.ready = [(job, None)] * 12
            assert len(dispatch.admit()) == expected and len(dispatch.ready) == 12 - expected
            release.set()
        release.clear()
    assert len(judged) == 2 * IN_FLIGHT + 2 and IN_FLIGHT == 3


def test_the_dispatcher_loads_the_next_candidates_children_before_it_admits_them():
    """On CUDA the children of the next AHEAD candidates per device start before a slot frees, and each goes to
    its candidate's run when admitted (stop 25: a candidate admitted only when a slot freed started its child
    then, and the H100 idled 27 % of a warm level-1 batch); the children of candidates never admitted are
    stopped when the batch ends; on CPU none start ahead."""
    import threading
    from concurrent.futures import ThreadPoolExecutor, wait
    from types import SimpleNamespace

    from evaluator.dispatch import AHEAD, IN_FLIGHT, Dispatcher

    release, judged, spawned = threading.Event(), [], []

    def judge_one(prep, compiled, child):
        judged.append((prep, child))
        release.wait(30)

    def spawn(prep):
        spawned.append(SimpleNamespace(prep=prep, finished=False))
        spawned[-1].finish = lambda wait=True, child=spawned[-1]: setattr(child, "finished", True)
        return spawned[-1]

    server = SimpleNamespace(prestart=lambda: None)
    open_ = SimpleNamespace(servers={}, spare=lambda waiting: None, admissible=lambda problem: True, server=lambda p: server,
                            placed={}, gpu_of=lambda problem: "0")
    jobs = [SimpleNamespace(job=SimpleNamespace(problem=resolve_problem("relu"))) for _ in range(IN_FLIGHT + AHEAD + 1)]
    batch = SimpleNamespace(settings=SimpleNamespace(device="cuda"), gpus=["0"])
    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as runners:
        dispatch = Dispatcher(batch, open_, runners, judge_one, spawn=spawn)
        dispatch.ready = [(job, None) for job in jobs]
        first = dispatch.admit()
        assert [c.prep for c in spawned] == jobs[IN_FLIGHT:IN_FLIGHT + AHEAD]  # before any slot frees
        release.set()
        wait(first)
        dispatch.running.clear()
        wait(dispatch.admit())
    given = {id(prep): child for prep, child in judged}
    assert [given[id(job)] for job in jobs[IN_FLIGHT:]] == [*spawned, None] and len(spawned) == AHEAD
    closed = SimpleNamespace(servers={}, spare=lambda waiting: None, admissible=lambda problem: False, placed={},
                             gpu_of=lambda problem: "0")
    spawned.clear()
    dispatch = Dispatcher(batch, closed, None, judge_one, spawn=spawn)
    dispatch.ready = [(job, None) for job in jobs]
    assert dispatch.admit() == set() and len(spawned) == AHEAD
    dispatch.close()
    assert all(child.finished for child in spawned) and dispatch.ahead == {}
    cpu = Dispatcher(SimpleNamespace(settings=SimpleNamespace(device="cpu"), gpus=[None]), closed, None, judge_one, spawn=spawn)
    cpu.ready = [(job, None) for job in jobs]
    assert cpu.admit() == set() and cpu.ahead == {}


def test_problems_are_placed_on_the_gpu_with_the_least_work_left_and_admitted_by_its_own_memory(cpu_settings):
    """Two devices (named, as a two-GPU batch names them): a problem's reference, comparer and candidates run on
    the one GPU it is placed on, chosen by the candidates still to be judged there; how many open on a device
    follows that device's memory, not the batch's (three at 15 % each would pass the two devices' 70 %)."""
    batch = Batch(cpu_settings)
    batch.gpus = ["0", "1"]
    a, b, c, d, e = (resolve_problem(n) for n in ("relu", "softmax", "matmul", "scale_bias_hardswish", "layernorm"))
    problems = OpenProblems(batch, [a, a, a, b, c, d, e])
    try:
        assert [problems.gpu_of(p) for p in (a, b, c, a)] == ["0", "1", "1", "0"]  # a's 3 left vs b's 1, then 2
        problems.finished_one(b)
        problems.finished_one(c)
        assert b.sha256 not in problems.placed and problems.gpu_of(d) == "1"  # "0" has a's 3 left, "1" none
        assert problems.server(a).gpu == "0" and problems.server(d).gpu == "1"
        assert problems.gpu_of(e) == "1" and problems.admissible(e)  # two on "1": 30 % of its memory
        problems.server(e)
        problems.placed[c.sha256] = "1"
        assert not problems.admissible(c)  # a third on "1": 45 %
        assert problems.held("1") == "; ".join(f"{p.name} {problems._expected(p) / 1e9:.1f} GB expected" for p in (d, e))
    finally:
        problems.close_all()
        shutil.rmtree(batch.root)


def test_the_dispatcher_fills_each_gpu_with_the_candidates_of_the_problems_placed_there(tmp_path):
    """Two devices: candidates are admitted up to the depth of their problem's GPU, so a problem with more
    candidates than that waits for its own GPU instead of spilling onto the other (its outputs would cross
    devices), and a problem is placed only where a candidate can start now."""
    import threading
    from concurrent.futures import ThreadPoolExecutor, wait
    from types import SimpleNamespace

    from evaluator.dispatch import Dispatcher

    release = threading.Event()
    batch = SimpleNamespace(settings=SimpleNamespace(device="cpu"), gpus=["0", "1"], root=tmp_path)
    a, b, c = (resolve_problem(n) for n in ("relu", "softmax", "matmul"))
    problems = OpenProblems(batch, [a, a, a, b, b, b, c, c])
    jobs = [SimpleNamespace(job=SimpleNamespace(problem=p)) for p in (a, a, a, b, b, b, c, c)]
    with ThreadPoolExecutor(max_workers=4) as runners:
        dispatch = Dispatcher(batch, problems, runners, lambda prep, compiled, child: release.wait(30))
        dispatch.ready = [(job, None) for job in jobs]
        first = dispatch.admit()
        assert sorted(dispatch.on.values()) == ["0", "0", "1", "1"] and c.sha256 not in problems.placed
        assert [item[0] for item in dispatch.ready] == [jobs[2], jobs[5], jobs[6], jobs[7]]
        release.set()
        wait(first)
        dispatch.running.clear()
        problems.finished_one(a)
        problems.finished_one(a)
        assert len(dispatch.admit()) == 3 and sorted(dispatch.on.values()) == ["0", "0", "1"]
        assert problems.placed[c.sha256] == "0"  # a's 1 left there, b's 3 on "1"
        assert [item[0] for item in dispatch.ready] == [jobs[7]]
    problems.close_all()


def test_cli_exits_1_when_a_reference_fails_and_doctor_lists_the_layers(tmp_path, build_root):
    """kforge's own failure is not the user's error (2) and not success (0): the verdicts are printed, then exit 1."""
    import json

    from conftest import kforge_runner

    run = kforge_runner(tmp_path, build_root, KFORGE_MEMORY_MB="2048")
    cand = tmp_path / "plain.py"
    cand.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    proc = run("submit", str(cand), "--problem", str(HUNGRY), "--device", "cpu", "--json", expect=1)
    line = json.loads(proc.stdout.splitlines()[-1])
    assert line["status"] == "reference_error" and "reference of 'hungry' failed" in line["cause"]
    assert "not judged" in proc.stderr
    layers = json.loads(run("doctor", "--json").stdout)
    assert set(layers) >= {"pid", "proc", "caps", "landlock", "seccomp", "identity"}


def test_one_device_is_used_by_one_kforge_process_at_a_time(cpu_settings):
    """Two batches (as two submitters would be) on one machine: the second gets the CPU only once the first gives
    it back; the lock is an flock, so a killed process releases it."""
    import time

    first, second = Batch(cpu_settings), Batch(cpu_settings)
    got: list[float] = []
    try:
        device = first.take_device()
        waiter = threading.Thread(target=lambda: got.append((second.take_device(), time.monotonic())[1]))
        waiter.start()
        time.sleep(1.0)
        assert got == []  # still held by the first
        released = time.monotonic()
        first.give_back(device)
        waiter.join(timeout=10)
        assert got and got[0] >= released
        second.give_back(None)
    finally:
        for batch in (first, second):
            shutil.rmtree(batch.root, ignore_errors=True)


def test_a_candidate_gives_the_gpu_back_while_its_child_still_loads(cpu_settings):
    """On CUDA a candidate that ran its problem's reference releases the device while its own child still loads,
    and another candidate's loaded child takes it meanwhile (both ask for the comparer's device, as candidates
    do); on CPU a candidate holds the device from its start to its end."""
    from evaluator.runner import _Hold

    gpu, cpu = Batch(cpu_settings.model_copy(update={"device": "cuda", "gpus": ["7"]})), Batch(cpu_settings)
    try:
        ran_reference, other = _Hold(gpu), _Hold(gpu)
        assert not ran_reference.held and ran_reference("7") == "7"
        ran_reference.release()
        taker = threading.Thread(target=other, args=("7",), daemon=True)
        taker.start()
        taker.join(timeout=10)
        assert not taker.is_alive() and other.held and not ran_reference.held
        other.release()
        whole = _Hold(cpu)
        assert whole.held  # before any child of it starts
        whole.release()
        assert whole.held
        cpu.give_back(whole.device)
    finally:
        for batch in (gpu, cpu):
            shutil.rmtree(batch.root, ignore_errors=True)


@pytest.mark.parametrize("raised, status", [(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB"),
                                             Status.REFERENCE_ERROR),
                                            (RuntimeError("the handed-over range is not what it says"), Status.CHEAT)])
def test_a_comparer_out_of_memory_is_kforges_failure_and_unreadable_outputs_are_the_candidates(raised, status, tmp_path,
                                                                                              monkeypatch):
    """On the H100 the comparer of a 17 GB problem ran out of GPU memory reading a timed call's outputs, and the
    honest candidate was judged `cheat: forged_outputs`. Memory is kforge's side: reference_error, cause kept."""
    from evaluator import comparer
    from evaluator.judge import Reference, _Case
    from evaluator.protocol import Compare
    from evaluator.results import ChildResult

    def fail(*_):
        raise raised

    monkeypatch.setattr(comparer, "_received", fail)
    answer = comparer.Comparer(None, 1e-4, 1e-4).compare(Compare(label="timed_4", expected="timed_4", trial=-1, outputs=[]))
    case = _Case(ChildResult(messages=[], log_path=tmp_path / "log"), Reference(meta={}, trials={}),
                 resolve_problem("relu").meta, EvalSettings(), {"timed_4": answer.model_dump()})
    outcome = case.judge_call("timed_4", -1, "timed call 4")
    assert outcome.status is status and str(raised)[:20] in outcome.evidence.cause
