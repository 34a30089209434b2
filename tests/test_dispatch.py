"""Which candidate goes to which device, and when (evaluator.parent.dispatch, evaluator.parent.references.OpenProblems): the
real dispatcher and the real OpenProblems over a batch whose devices are named like a host's GPUs and whose
children are recorded instead of started (the CPU path runs real children: tests/test_references.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from types import SimpleNamespace

import pytest

from evaluator.parent import references
from evaluator.parent.dispatch import AHEAD, IN_FLIGHT, Dispatcher
from evaluator.parent.references import OpenProblems
from reference_problems import resolve_problem


class _Child:
    """What the dispatcher and OpenProblems do with a child: start it for a GPU, later finish it."""

    def __init__(self, problem, gpu):
        self.problem, self.gpu, self.finished = problem, gpu, False
        self.proc = SimpleNamespace(poll=lambda: 0)

    def finish(self, wait: bool = True) -> None:
        self.finished = True


@pytest.fixture
def batch(tmp_path, monkeypatch):
    """A CUDA batch over named devices (set .gpus) whose every child is recorded in .children."""
    monkeypatch.setattr(references, "device_memory", lambda device: 80 * 10**9)
    made = SimpleNamespace(settings=SimpleNamespace(device="cuda"), gpus=["0"], root=tmp_path, children=[])

    def spawn(workdir, build_dir, problem, candidate=None, gpu=None, **_):
        made.children.append(_Child(problem, gpu))
        return made.children[-1]
    made.spawn = spawn
    return made


def _jobs(*names: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(job=SimpleNamespace(problem=resolve_problem(name))) for name in names]


class _Runs:
    """The runners' side: each admitted candidate waits until released; what each was given is kept."""

    def __init__(self):
        self.release, self.given = threading.Event(), []

    def __call__(self, prep, compiled, child, gpu):
        self.given.append((prep, child, gpu))
        self.release.wait(30)


def _dispatcher(batch, jobs, runs, pool, spawn=None) -> tuple[Dispatcher, OpenProblems]:
    problems = OpenProblems(batch, [job.job.problem for job in jobs])
    dispatch = Dispatcher(batch, problems, pool, runs, spawn=spawn)
    dispatch.ready = [(job, None) for job in jobs]
    return dispatch, problems


def _served(dispatch: Dispatcher, problems: OpenProblems) -> None:
    """Every running candidate is on a GPU that serves its problem, with the problem's server there."""
    for prep, _, gpu in dispatch.judge_one.given:
        assert gpu in problems.gpus_of(prep.job.problem) and (prep.job.problem.sha256, gpu, 0) in problems.servers


def test_spare_references_start_for_compiled_problems_then_those_still_compiling(batch):
    """On CUDA the first references start beside the compiles: the first candidate compiled no longer waits
    ~7 s for its reference's interpreter and torch (seeds + repairs cold, H100)."""
    runs = _Runs()
    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        dispatch, problems = _dispatcher(batch, _jobs("matmul"), runs, pool)
        dispatch.compiling = _jobs("relu", "softmax", "layernorm")
        dispatch.admit()
        runs.release.set()
    # matmul's reference (its admission), then spares for the problems still compiling, two per device
    assert [(c.problem.name, c.gpu) for c in batch.children] == [("matmul", "0"), ("relu", "0"), ("softmax", "0")]
    problems.close_all()


@pytest.mark.parametrize("device, gpus, admitted", [("cuda", ["0", "1"], 2 * IN_FLIGHT), ("cpu", [None], 2)])
def test_one_problem_fills_every_gpu_each_with_a_reference_of_its_own(batch, device, gpus, admitted):
    """IN_FLIGHT candidates per device on CUDA (one running, two ready to take it: children forked in ~0.05 s,
    benchmarks/eval_speed.py), two on CPU. A batch of one problem uses every GPU: the second candidate does not queue behind the
    first while a GPU has nothing to do; that GPU serves the problem too, with its own reference child there."""
    batch.settings.device, batch.gpus = device, gpus
    runs = _Runs()
    with ThreadPoolExecutor(max_workers=2 * IN_FLIGHT) as pool:
        dispatch, problems = _dispatcher(batch, _jobs(*["relu"] * 12), runs, pool)
        assert len(dispatch.admit()) == admitted and len(dispatch.ready) == 12 - admitted
        assert sorted(dispatch.on.values(), key=str) == sorted(gpus * (admitted // len(gpus)), key=str)
        runs.release.set()
    _served(dispatch, problems)
    assert problems.gpus_of(resolve_problem("relu")) == gpus
    if device == "cuda":  # one reference child per GPU, started for it
        assert sorted(c.gpu for c in batch.children if c.problem.name == "relu") == gpus
    problems.close_all()


def test_a_candidate_does_not_queue_behind_another_while_a_gpu_is_idle(batch):
    """Two candidates of one problem, two idle GPUs: one on each (with three in flight per GPU both would
    otherwise go to the problem's first GPU, one waiting ~3 s behind the other)."""
    batch.gpus = ["0", "1"]
    runs = _Runs()
    with ThreadPoolExecutor(max_workers=2) as pool:
        dispatch, problems = _dispatcher(batch, _jobs("relu", "relu"), runs, pool)
        dispatch.admit()
        runs.release.set()
    assert sorted(gpu for _, _, gpu in runs.given) == ["0", "1"]
    _served(dispatch, problems)
    problems.close_all()


def test_new_problems_go_where_a_candidate_can_start_and_stay_there(batch):
    """Distinct problems spread over the least busy GPUs; a problem's later candidates join it on its GPU
    rather than open it again elsewhere while every GPU is busy; a problem is placed only where a candidate can
    start now (the others wait unplaced)."""
    batch.settings.device, batch.gpus = "cpu", ["0", "1"]  # two in flight per device; no children started
    jobs = _jobs("relu", "softmax", "relu", "matmul", "softmax", "layernorm")
    runs = _Runs()
    with ThreadPoolExecutor(max_workers=4) as pool:
        dispatch, problems = _dispatcher(batch, jobs, runs, pool)
        dispatch.admit()
        runs.release.set()
    on = {prep.job.problem.name: set() for prep, _, _ in runs.given}
    for prep, _, gpu in runs.given:
        on[prep.job.problem.name].add(gpu)
    assert on == {"relu": {"0"}, "softmax": {"1"}, "matmul": {"1"}} and len(runs.given) == 4
    assert resolve_problem("layernorm").sha256 not in problems.placed  # no room anywhere: not placed yet
    _served(dispatch, problems)
    problems.close_all()


def test_a_child_loaded_ahead_goes_to_its_candidate_only_on_the_gpu_it_was_loaded_for(batch):
    """The children of the next AHEAD candidates per device start before a slot frees, each for its problem's
    GPU, and go to their candidate's run when it is admitted there (a child started only at admission
    left the H100 idle 27 % of a warm level-1 batch); one loaded for another GPU is ended, not handed over; the
    children of candidates never admitted are ended with the batch."""
    jobs = _jobs(*["relu"] * (IN_FLIGHT + AHEAD + 1))
    runs, loaded = _Runs(), []

    def spawn(prep, gpu):
        loaded.append(_Child(prep.job.problem, gpu))
        return loaded[-1]

    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        dispatch, problems = _dispatcher(batch, jobs, runs, pool, spawn=spawn)
        first = dispatch.admit()
        assert [c.gpu for c in loaded] == ["0"] * AHEAD and not any(c.finished for c in loaded)
        runs.release.set()
        wait(first)
        dispatch.running.clear()
        wait(dispatch.admit())
        given = {id(prep): child for prep, child, _ in runs.given}
        assert [given[id(job)] for job in jobs[IN_FLIGHT:]] == [*loaded, None]
        stray = _Child(None, "1")
        dispatch.ready, dispatch.ahead = [(jobs[0], None)], {id(jobs[0]): (stray, "1")}
        dispatch.running.clear()
        runs.given.clear()
        wait(dispatch.admit())
    assert stray.finished and runs.given[0][1] is None and runs.given[0][2] == "0"
    left = _Child(None, "0")
    dispatch.ahead = {1: (left, "0")}
    dispatch.close()
    assert left.finished and dispatch.ahead == {}
    problems.close_all()


def test_problems_are_placed_by_the_work_left_and_opened_by_each_gpus_own_memory(batch):
    """A problem's first GPU is the one with the fewest candidates still to be judged among the problems there;
    how many open on a device follows that device's memory (three comparers at 15 % each would pass the two
    devices' 70 %, not one device's 35 %); a problem's placement ends with its last candidate."""
    batch.settings.device, batch.gpus = "cpu", ["0", "1"]
    a, b, c, d, e = (resolve_problem(n) for n in ("relu", "softmax", "matmul", "scale_bias_hardswish", "layernorm"))
    problems = OpenProblems(batch, [a, a, a, b, c, d, e])
    assert [problems.gpu_of(p) for p in (a, b, c, a)] == ["0", "1", "1", "0"]  # a's 3 left vs b's 1, then 2
    problems.finished_one(b)
    problems.finished_one(c)
    assert b.sha256 not in problems.placed and problems.gpu_of(d) == "1"  # "0" has a's 3 left, "1" none
    assert problems.server(a, "0").gpu == "0" and problems.server(d, "1").gpu == "1"
    assert problems.gpu_of(e) == "1" and problems.admissible(e, "1")  # two on "1": 30 % of its memory
    problems.server(e, "1")
    assert not problems.admissible(c, "1") and problems.admissible(c, "0")  # a third on "1": 45 %
    assert problems.held("1") == "; ".join(f"{p.name} {problems._expected(p) / 1e9:.1f} GB expected" for p in (d, e))
    problems.extend(a, "1")
    assert problems.gpus_of(a) == ["0", "1"] and problems.server(a, "1") is not problems.server(a, "0")
    for _ in range(3):
        problems.finished_one(a)
    assert not problems.is_open(a) and a.sha256 not in problems.placed
    problems.close_all()


def test_every_gpu_keeps_its_own_spare_references_loading(batch):
    """Spares are bounded per GPU, not for all GPUs together: while one GPU still has many candidates of its
    problem to judge, the problems waiting are not all placed (and loaded) on the other, which would leave the
    first with no reference loaded once it is through."""
    batch.gpus = ["0", "1"]
    busy, *waiting = (resolve_problem(n) for n in ("relu", "softmax", "matmul", "layernorm", "conv1d", "mlp", "avg_pool_1d"))
    problems = OpenProblems(batch, [busy] * 6 + waiting)
    assert problems.gpu_of(busy, ["1"]) == "1"
    problems.spare(waiting)
    spared = [(c.problem.name, c.gpu) for c in batch.children]
    assert spared == [("softmax", "0"), ("matmul", "0"), ("layernorm", "1"), ("conv1d", "1")]
    problems.server(resolve_problem("layernorm"), "1")  # opens on its GPU, taking its spare
    problems.spare(waiting)
    assert [(c.problem.name, c.gpu) for c in batch.children[len(spared):]] == [("mlp", "1")]
    problems.close_all()


def test_every_gpu_has_its_next_candidate_loading(batch):
    """AHEAD children per GPU, not for all GPUs together: when the next candidates in line are all for one GPU,
    the other still gets its next one's child started (a problem not yet placed goes where none loads)."""
    batch.gpus = ["0", "1"]
    jobs = _jobs("relu", "relu", "softmax", "matmul")
    loaded = []

    def spawn(prep, gpu):
        loaded.append((prep.job.problem.name, gpu))
        return _Child(prep.job.problem, gpu)

    dispatch, problems = _dispatcher(batch, jobs, _Runs(), None, spawn=spawn)
    assert problems.gpu_of(resolve_problem("relu"), ["0"]) == "0" and problems.gpu_of(resolve_problem("softmax"), ["1"]) == "1"
    dispatch._load_ahead()
    assert loaded == [("relu", "0"), ("softmax", "1")][:AHEAD * 2] and AHEAD == 1
    dispatch.ready = [(jobs[1], None), (jobs[3], None)]  # the first relu admitted on "0", softmax on "1"
    del dispatch.ahead[id(jobs[0])], dispatch.ahead[id(jobs[2])]
    dispatch._load_ahead()
    assert loaded[2:] == [("relu", "0"), ("matmul", "1")]
    dispatch.close()
    problems.close_all()
