"""Each problem's reference: opened lazily, held in its own child (the comparer), bounded in number, closed when its
last candidate is judged; one that fails ends only its own problem's candidates."""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import SOLUTIONS
from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.parent.references import OpenProblems, ReferenceFailed, ReferenceServer, _RESIDENT_SHARE
from evaluator.parent.batch import CLOSING_SHARE, Batch
from evaluator.hardware import device_memory
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
        assert problems.admissible(a, None)
        problems.server(a, None)
        assert problems.admissible(b, None)  # one pending comparer (its resident budget) + one more still fit
        problems.server(b, None)
        assert not problems.admissible(c, None) and problems.admissible(a, None)
        problems.finished_one(a)
        assert problems.admissible(c, None) and not problems.is_open(a)
        assert _RESIDENT_SHARE < 0.5
    finally:
        problems.close_all()
        shutil.rmtree(batch.root)


def test_a_problem_is_expected_to_hold_what_one_call_moves_beside_its_resident_outputs(cpu_settings):
    """Before its reference ran, a problem counts its resident budget plus one call's bytes (measured on the meta
    device by evaluator.parent.flops): a second problem that fits beside a first on the budget alone does not open
    beside it when its call moves a fifth of the device; unmeasured, it counts the budget alone."""
    batch = Batch(cpu_settings)
    a, b = resolve_problem("relu"), resolve_problem("softmax")
    for big, opens in ((None, True), (0.2, False)):
        problems = OpenProblems(batch, [a, b], sizes=lambda p: int(big * problems._memory) if big and p is b else None)
        try:
            assert problems.held() == "none"
            problems.server(a, None)
            assert problems.admissible(b, None) is opens
            assert problems.held() == f"relu {problems._expected(a) / 1e9:.1f} GB expected"  # an out-of-memory's evidence
        finally:
            problems.close_all()
    shutil.rmtree(batch.root)


def test_spare_reference_children_start_ahead_bounded_and_are_taken_or_ended(cpu_settings):
    """Problems waiting to open get their reference child started early (on CUDA the dispatcher asks; the child
    holds no device memory until its request), at most _SPARES_PER_DEVICE; a problem that opens takes its spare
    (the same process, which then serves), and close_all ends the spares nobody took."""
    from evaluator.parent.references import _SPARES_PER_DEVICE

    batch = Batch(cpu_settings)
    a, b, c = (resolve_problem(n) for n in ("relu", "softmax", "matmul"))
    problems = OpenProblems(batch, [a, b, c])
    try:
        problems.spare([a, a, b, c])
        assert list(problems.spares) == [a.sha256, b.sha256][:_SPARES_PER_DEVICE]
        spare = problems.spares[a.sha256]
        server = problems.server(a, None)
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


def test_cli_exits_1_when_a_reference_fails_and_doctor_lists_the_layers(tmp_path, build_root):
    """kforge's own failure is not the user's error (2) and not success (0): the verdicts are printed, then exit 1."""
    import json

    from conftest import kforge_runner

    run = kforge_runner(tmp_path, build_root, KFORGE_MEMORY_MB="2048")
    cand = tmp_path / "plain.py"
    # ctypes could load a kernel: not judged from its code alone, so it waits for the reference that fails
    cand.write_text("import ctypes\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
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


def test_a_candidate_gives_the_gpu_back_while_its_child_still_loads(cpu_settings, tmp_path, monkeypatch):
    """On CUDA a candidate that ran its problem's reference releases the device while its own child still loads,
    and another candidate's loaded child takes it meanwhile (both ask for the comparer's device, as candidates
    do); on CPU a candidate holds the device from its start to its end."""
    from evaluator.parent import leases
    from evaluator.parent.hold import Hold

    monkeypatch.setattr(leases, "LOCK_DIR", tmp_path / "locks")  # GPU 7 is no device here: `kforge status` never sees it

    gpu, cpu = Batch(cpu_settings.model_copy(update={"device": "cuda", "gpus": ["7"]})), Batch(cpu_settings)
    try:
        ran_reference, other = Hold(gpu), Hold(gpu)
        assert not ran_reference.held and ran_reference("7") == "7"
        ran_reference.release()
        taker = threading.Thread(target=other, args=("7",), daemon=True)
        taker.start()
        taker.join(timeout=10)
        assert not taker.is_alive() and other.held and not ran_reference.held
        other.release()
        whole = Hold(cpu)
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
    from evaluator.child import comparer
    from evaluator.verdict.case import Case, Reference, answers
    from evaluator.protocol import Compare
    from evaluator.sandbox.results import ChildResult

    def fail(*_):
        raise raised

    monkeypatch.setattr(comparer, "_received", fail)
    answer = comparer.Comparer(None, 1e-4, 1e-4).compare(Compare(label="timed_4", expected="timed_4", trial=-1, outputs=[]))
    case = Case(ChildResult(messages=[], log_path=tmp_path / "log"), Reference(meta={}, trials={}),
                 resolve_problem("relu").meta, EvalSettings(), answers({"timed_4": answer.model_dump()}))
    outcome = case.judge_call("timed_4", -1, "timed call 4")
    assert outcome.status is status and str(raised)[:20] in outcome.evidence.cause


def test_a_reference_times_its_model_only_once_no_comparer_is_closing(cpu_settings):
    """A comparer closing on the device (on CUDA, after the device was given back) lets the next reference make
    its outputs beside it, where its memory fits, but not time its model: the reference's request goes out at
    once, it asks for quiet after its trials, and its timing starts only after the closing comparer is gone."""
    batch = Batch(cpu_settings)
    gone = batch.closing(None, 1)  # one byte: fits beside any reference
    server = ReferenceServer(batch, resolve_problem("softmax"), room=0)
    closed_at: list[float] = []

    def close_later() -> None:
        server.child.wait_for("quiet", timeout_s=120)
        threading.Event().wait(1.0)
        closed_at.append(time.monotonic())
        gone()

    server.prestart()
    closer = threading.Thread(target=close_later)
    closer.start()
    try:
        ref = server.ready(lambda want=None: None)
    finally:
        closer.join()
        server.close()
        shutil.rmtree(batch.root)
    arrived = {m["event"] + (":" + m["stage"] if m["event"] == "stage" else ""): m["_t"] for m in server.child.result.messages}
    assert arrived["trials"] < arrived["quiet"] < closed_at[0] < arrived["stage:timing"], arrived
    assert ref.timing is not None and ref.run_s < arrived["ready"] - server.child.result.started - 0.9  # the wait is not its run


def test_a_reference_that_would_not_fit_beside_a_closing_comparer_waits_to_start(cpu_settings):
    """Where the comparers still closing and what the new reference will hold pass half the device's memory, the
    reference's request goes out only once they are gone; a call that only times waits for every one of them."""
    batch = Batch(cpu_settings)
    half = int(CLOSING_SHARE * device_memory("cpu"))
    gone = batch.closing(None, half)
    waited: dict[str, float] = {}

    def settle(name: str, room: int | None) -> None:
        start = time.monotonic()
        batch.settle(None, room)
        waited[name] = time.monotonic() - start

    threads = [threading.Thread(target=settle, args=args) for args in (("fits", 0), ("too_big", 1), ("timed", None))]
    for thread in threads:
        thread.start()
    threading.Event().wait(0.6)
    gone()
    for thread in threads:
        thread.join()
    shutil.rmtree(batch.root)
    assert waited["fits"] < 0.3 and waited["too_big"] >= 0.5 and waited["timed"] >= 0.5, waited


def test_a_reference_joins_a_device_only_where_its_holder_left_room_and_takes_it_next(cpu_settings):
    """A reference's untimed part may join a held device only once its holder opened it (its timed rounds ended)
    with room for what the reference will hold; one at a time; when the holder gives the device back, the joined
    reference takes it before any other waiter, and a reference that could not join takes it as usual after."""
    batch = Batch(cpu_settings)
    got: dict[str, object] = {}

    def later(name: str, call) -> threading.Thread:
        thread = threading.Thread(target=lambda: got.__setitem__(name, call()))
        thread.start()
        return thread

    def settled() -> set[str]:
        time.sleep(0.6)
        return set(got)

    try:
        holder = batch.take_device()
        big = later("big", lambda: batch.join(None, 100))
        assert settled() == set()  # not opened
        batch.open_beside(None, 50)
        assert settled() == set()  # opened, too little room
        later("small", lambda: batch.join(None, 10)).join(timeout=5)
        assert got == {"small": False}  # beside the holder
        batch.open_beside(None, 1000)
        plain = later("plain", lambda: batch.take_device() or "taken")
        batch.give_back(holder)
        assert settled() == {"small"}  # the big one waits: one beside at a time; the plain take: the joined goes first
        batch.take_device(joined=True)
        batch.give_back(None)
        assert len(settled() - {"small"}) == 1  # then the other two in turn
        batch.give_back(None)
        plain.join(timeout=5)
        big.join(timeout=5)
        assert got["plain"] == "taken" and got["big"] is True  # taken, not joined: the device was free
        batch.give_back(None)
    finally:
        batch.stop.set()
        shutil.rmtree(batch.root)


def test_a_reference_beside_another_candidate_takes_the_device_before_it_times(cpu_settings):
    """Joined beside another candidate's last stages, a reference makes its outputs, then takes the device (the
    candidate's hold) before it times its model; one that failed beside runs once more alone, and only that
    failure is its problem's."""
    batch = Batch(cpu_settings.model_copy(update={"limits": cpu_settings.limits.model_copy(update={"memory_mb": 4096})}))
    events: list[str] = []
    take = lambda want=None: events.append("take")  # noqa: E731
    join = lambda want, room: (events.append("join"), (want, True))[1]  # noqa: E731
    good = ReferenceServer(batch, resolve_problem("softmax"), room=0)
    hungry = ReferenceServer(batch, resolve_problem(str(HUNGRY)), room=0)
    try:
        assert good.ready(take, join).timing is not None
        assert events == ["join", "take"]
        arrived = {m["event"] + (":" + m["stage"] if m["event"] == "stage" else ""): m["_t"] for m in good.child.result.messages}
        assert arrived["trials"] < arrived["stage:quiet"] < arrived["quiet"] < arrived["stage:timing"]
        events.clear()
        with pytest.raises(ReferenceFailed, match="allocate memory"):
            hungry.ready(take, join)
        assert events == ["join", "take"]  # beside, failed; then taken, alone, failed again
    finally:
        good.close()
        hungry.close()
        shutil.rmtree(batch.root)


def test_a_candidates_probe_frees_its_comparer_only_after_its_rounds_and_its_verify_call(tmp_path):
    """On CUDA the candidate's probe is its comparer's last use, so its problem may close it then (beside the
    candidate's final check and exit), but only once the parent ended the timed rounds and compared the verify
    call: a probe sent earlier (a hostile child's) frees nothing that its later reference blocks would need, and
    a handoff after it is the candidate's forgery (a read error: `forged_outputs`), never a comparer gone."""
    from types import SimpleNamespace

    from evaluator.parent.runner import _relay
    from evaluator.verdict.checks import Checks
    from evaluator.verdict.pacing import Pacer

    freed: list[str] = []
    batch = SimpleNamespace(settings=EvalSettings(device="cuda"))
    pacer = Pacer(lambda first, reps: [1.0] * reps, rel_ci=None, max_reps=100)
    comparisons: dict[str, dict] = {}
    relay = _relay(batch, SimpleNamespace(workdir=tmp_path), None, comparisons, pacer, None, {}, Checks(100),
                   SimpleNamespace(held=False), lambda: freed.append("comparer"))  # a hold that never held the GPU
    probe = {"event": "probe", "outputs": {}, "inputs_changed": False}
    assert relay(probe) is None and freed == []  # rounds still to come
    assert relay({"event": "pace", "which": 0, "reps": 0, "last_round": [], "least": 0}).go is False
    assert pacer.ended and relay(probe) is None and freed == []  # the verify call not compared yet
    comparisons["verify"] = {"ok": True}
    relay(probe)
    relay(probe)
    assert freed == ["comparer"]
    outputs = {"event": "outputs", "which": "timed_3", "outputs": []}
    assert relay(outputs).ack == "timed_3" and "after the probe" in comparisons["timed_3"]["error"]  # no comparer asked
