"""The one timing function: how many reps it takes, and the median's interval it reports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import timeit

import pytest
import torch

from conftest import ROOT
from evaluator.child.timing import bench
from evaluator.statistics import median_interval, paired_ratio, summarize


def test_the_median_interval_is_the_order_statistics_around_the_middle():
    samples = list(range(1, 101))  # 1..100: ranks 40 and 60 (0-based 40 and 59) bound the median's 95 % interval
    low, high = median_interval(samples)
    assert (low, high) == (41, 60)
    stats = summarize([float(x) for x in samples], "perf_counter")
    assert stats.median_ci_low_ms <= stats.median_ms <= stats.median_ci_high_ms


def _steady() -> None:
    end = time.perf_counter() + 0.002  # 2 ms of busy work: the same every call, on a quiet core
    while time.perf_counter() < end:
        pass


def test_a_steady_call_stops_once_its_median_is_known_and_a_fixed_budget_does_not():
    seen = []
    adaptive = bench(_steady, "cpu", 10, 1000, 10, 1000, rel_ci=0.005,
                     on_rep=lambda i, least, last, out, seen_in_window: seen.append((i, least, last)))
    # a 1 s budget would be ~500 reps; quiet, this stops after 20-40, and on a loaded machine (preempted calls
    # widen the spread) it took up to 130: still well short of the budget
    assert 20 <= len(adaptive) < 250
    low, high = median_interval(adaptive)
    assert (high - low) / 2 <= 0.005 * sorted(adaptive)[len(adaptive) // 2] * 1.01
    assert seen[-1][2] and all(i == k for k, (i, _, _) in enumerate(seen)) and {least for _, least, _ in seen} == {20}
    fixed = bench(_steady, "cpu", 10, 200, 10, 1000, rel_ci=None)
    assert len(fixed) >= 90  # about rep_ms / 2 ms


@pytest.mark.parametrize("rel_ci", [0.005, None])
def test_min_and_max_reps_bound_every_run(rel_ci):
    assert len(bench(_steady, "cpu", 1, 10, 30, 1000, rel_ci=rel_ci)) >= 30
    assert len(bench(_steady, "cpu", 1, 5000, 5, 15, rel_ci=rel_ci)) <= 15


def test_fresh_runs_before_every_call_outside_the_timer():
    """fresh(i) precedes call i: negative for the untimed calls (estimate, warmup), 0.. for the timed reps; a slow
    fill never shows in the samples."""
    events = []

    def fill(i: int) -> None:
        events.append(("fresh", i))
        time.sleep(0.02)  # ten times the call: it would dominate any sample it leaked into

    def call() -> None:
        events.append(("call", None))
        _steady()

    samples = bench(call, "cpu", 5, 50, 10, 15, rel_ci=None, fresh=fill, mark=lambda n: events.append(("mark", n)))
    kinds = [e[0] for e in events if e[0] != "mark"]
    assert kinds == ["fresh", "call"] * (len(kinds) // 2)  # every call right after its own fill
    fills = [i for kind, i in events if kind == "fresh"]
    (marked,) = [n for kind, n in events if kind == "mark"]
    assert fills == [-k for k in range(1, marked + 1)] + list(range(len(samples)))
    assert max(samples) < 15  # 2 ms calls (a loaded machine stretches some); the 20 ms fills stayed out of every one


def test_a_slow_call_is_estimated_in_fewer_calls_which_count_as_its_warmup():
    """Measured calls of the estimate stop once they add up to 100 ms: a 60 ms call is estimated from 2 after the
    first (a 2 ms call from 5). Those calls warm up too: a warmup they already cover adds no call, and a longer one
    only what is left of it (100 ms of 2 ms calls, ~12 ms of them the estimate's)."""
    untimed = []
    for ms, warmup_ms, estimated, warm in ((60, 1, 3, range(1)), (2, 1, 6, range(1)), (2, 100, 6, range(30, 45))):
        bench(lambda: time.sleep(ms / 1e3), "cpu", warmup_ms, 1, 1, 1, rel_ci=None, mark=untimed.append)
        assert untimed.pop() - estimated in warm


def _small_relu():
    """The relu problem's module at its small size: inputs of one tensor, cheap to make on CPU."""
    from evaluator.child.loading import load_problem
    from reference_problems import resolve_problem

    relu = resolve_problem("relu")
    return load_problem(relu.path, relu.meta.small)


def test_fresh_inputs_are_new_values_in_the_same_tensors():
    from evaluator.child.trials import FreshInputs, make_inputs, rep_seed
    from evaluator.labels import timed_rep

    problem = _small_relu()
    inputs = make_inputs(problem, 7, "cpu")
    address, fresh = inputs[0].data_ptr(), FreshInputs(inputs, problem, 7, "cpu")
    assert fresh.label() == "timing" and not fresh.changed()
    fresh(3)
    assert inputs[0].data_ptr() == address and fresh.label() == "timed_3" and timed_rep(fresh.label()) == 3
    assert torch.equal(inputs[0], make_inputs(problem, rep_seed(7, 3), "cpu")[0]) and not fresh.changed()
    assert len({rep_seed(7, rep) for rep in range(-50, 1000)}) == 1050  # every call its own seed
    inputs[0][0, 0] += 1  # what a candidate writing into its inputs does
    assert fresh.changed()


def test_a_write_into_inputs_not_yet_refilled_is_seen_without_making_them_again(monkeypatch):
    from evaluator.child import trials

    problem = _small_relu()
    inputs = trials.make_inputs(problem, 7, "cpu")
    fresh = trials.FreshInputs(inputs, problem, 7, "cpu")
    monkeypatch.setattr(trials, "make_inputs", lambda *args, **kw: pytest.fail("the inputs were made again"))
    assert not fresh.changed()
    inputs[0][0, 0] += 1  # what the leak check's calls of a candidate writing into its inputs leave
    assert fresh.changed()


def test_a_write_into_refilled_inputs_is_seen_in_the_same_tensors(monkeypatch):
    """After a fill, the fill's values are written again into the inputs themselves to fingerprint them: no
    second input set beside the candidate's (2 x 17 GB at avg_pool_2d's own size)."""
    from evaluator.child import trials

    problem = _small_relu()
    inputs = trials.make_inputs(problem, 7, "cpu")
    fresh = trials.FreshInputs(inputs, problem, 7, "cpu")
    fresh.fill(3)
    expected = trials.make_inputs(problem, fresh.held(), "cpu")[0]
    made = trials.make_inputs
    monkeypatch.setattr(trials, "make_inputs", lambda *args, into=None: made(*args, into=into) if into is not None
                        else pytest.fail("a second input set was made"))
    assert not fresh.changed()
    inputs[0][0, :2] = inputs[0][0, :2].flip(0)  # a swap: what a candidate using its input as scratch leaves
    assert fresh.changed()
    assert torch.equal(inputs[0], expected) and not fresh.changed()  # the fill's values again, in place


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int8, torch.complex128])
def test_the_input_fingerprint_sees_writes_that_keep_the_sum(dtype):
    """Swaps within a row of the checksum's view, across rows, in the tail past the last whole row, and the
    whole input reversed (scratch for an in-place transpose or sort): every one keeps a plain sum. (The plain
    sum had no 16-byte word: a complex128 input failed the child.)"""
    from evaluator.child.trials import fingerprint

    x = (torch.randn(3 * 4096 + 100, generator=torch.Generator().manual_seed(0)) * 50).to(dtype)  # 100 in the tail
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32}.get(x.element_size(), torch.int64)  # complex128: 16 bytes

    def swapped(i: int, j: int) -> torch.Tensor:
        assert x[i] != x[j]
        y = x.clone()
        y[i], y[j] = x[j], x[i]
        return y
    assert fingerprint([x.clone()]) == fingerprint([x])
    for changed in (swapped(1, 2), swapped(5, 4096 + 9), swapped(-1, -3), x.flip(0)):
        assert changed.view(bits).sum() == x.view(bits).sum() and fingerprint([changed]) != fingerprint([x])


_FINGERPRINT_PEAK = """
import resource, torch
from evaluator.child.trials import fingerprint
x = torch.randn(2**26 + 77)  # 256 MiB of fp32
inputs = [x, x[1:], x.to(torch.float16), x > 0]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fingerprint(inputs)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_the_input_fingerprint_copies_nothing():
    """Sums in the words' own type: torch's int64 sum of int32 words copied the whole input first (a 6.4 GB
    input needed 12.8 GB more: out of memory on the H100)."""
    ran = subprocess.run([sys.executable, "-c", _FINGERPRINT_PEAK], capture_output=True, text=True, check=True,
                         timeout=120, cwd=ROOT)
    assert int(ran.stdout) < 16 * 2**20


def test_the_comparer_recomputes_a_timed_call_in_the_timers_own_tensors():
    """A second set of a 16 GB input ran the comparer out of memory beside its candidate on the H100 (benchmarks/giant_memory.py)."""
    from evaluator.child.comparer import Expected
    from evaluator.child.trials import FreshInputs, make_inputs, rep_seed

    problem = _small_relu()
    inputs = make_inputs(problem, 7, "cpu")
    expected = Expected(torch.nn.ReLU(), problem, {"timing": 7}, "cpu", budget=0)
    expected.timed = FreshInputs(inputs, problem, 7, "cpu")
    again = expected.inputs("timed_4")
    assert again[0] is inputs[0] and torch.equal(inputs[0], make_inputs(problem, rep_seed(7, 4), "cpu")[0])
    assert torch.equal(expected.outputs("timed_5")[0], torch.relu(make_inputs(problem, rep_seed(7, 5), "cpu")[0]))
    assert expected.inputs("timing")[0] is not inputs[0]  # any other label: its own tensors, as before


@pytest.mark.parametrize("body, in_place", [
    ("return [torch.rand(256, 256), torch.randn(256, 256) * 2 - 1, torch.randint(0, 9, (7,)), 3]", True),
    ("x = torch.rand(256, 256); w = torch.rand(256, 256); return [x @ w, x]", False),  # x is a target and returned
    ("x = torch.rand(256, 256); y = torch.rand(256, 256); return [y, x]", False),
    ("x = torch.rand(256, 256); return [x.t(), torch.rand(256, 256)]", False),  # a view of a target
])
def test_a_refill_writes_into_the_inputs_without_a_second_copy_and_never_mixes_them_up(body, in_place, monkeypatch):
    """A 17 GB input and a fresh copy of it did not fit one H100 beside the comparer (CUDA OOM in the timing
    loop): the refill now writes the new values straight into the tensors. Where the problem's inputs alias one
    another, it falls back to making them apart, and the values are the same either way."""
    import types

    from evaluator.child import trials

    problem = types.ModuleType("aliasing")
    exec("import torch\ndef get_inputs():\n    " + body, problem.__dict__)
    inputs = trials.make_inputs(problem, 1, "cpu")
    addresses, want = [t.data_ptr() for t in inputs[:2]], trials.make_inputs(problem, 5, "cpu")
    made, copied = [], []
    real_make = trials.make_inputs
    monkeypatch.setattr(trials, "make_inputs", lambda *a, **k: made.append(k.get("into") is not None) or real_make(*a, **k))

    class Counted:  # the tensor methods the refill uses, counting the copies it makes
        def __getattr__(self, name):
            return getattr(torch._C.TensorBase, name)

        def copy_(self, a, b):
            copied.append(a.shape)
            return torch._C.TensorBase.copy_(a, b)

    monkeypatch.setattr(trials, "_T", Counted())
    trials.refill(inputs, problem, 5, "cpu")
    assert [t.data_ptr() for t in inputs[:2]] == addresses
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(inputs, want))
    assert made == ([True] if in_place else [True, False])
    if in_place:  # only the computed input (randn * 2 - 1) is copied; the plain draws were made in place
        assert copied == [torch.Size([256, 256])]


def test_inputs_whose_shape_changes_with_the_seed_stay_fresh_in_new_tensors():
    """The in-place pass writes the square input before the seed's other input turns out not to fit: the list
    then holds that seed's new inputs, whole, and every timed call keeps its own label (fixed inputs under one
    label let a cache pass, and the judge refused them for honest kernels too)."""
    import types

    from evaluator.child import trials

    problem = types.ModuleType("ragged")
    exec("import torch\ndef get_inputs():\n    n = int(torch.randint(1, 4, ()).item())\n"
         "    return [torch.rand(64, 64), torch.rand(n, 8)]", problem.__dict__)
    rows = {seed: trials.make_inputs(problem, seed, "cpu")[1].shape[0] for seed in range(1, 40)}
    other = next(seed for seed, n in rows.items() if n != rows[1])
    inputs = trials.make_inputs(problem, 1, "cpu")
    trials.refill(inputs, problem, other, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(inputs, trials.make_inputs(problem, other, "cpu")))
    inputs = trials.make_inputs(problem, 1, "cpu")
    fresh = trials.FreshInputs(inputs, problem, 1, "cpu")
    reps = [rep for rep in range(40) if rows[1] != trials.make_inputs(problem, trials.rep_seed(1, rep), "cpu")[1].shape[0]]
    fresh(reps[0])
    assert fresh.label() == f"timed_{reps[0]}" and not fresh.changed()
    assert all(torch.equal(a, b) for a, b in zip(inputs, trials.make_inputs(problem, trials.rep_seed(1, reps[0]), "cpu")))


_FIRST_FILL = """
import sys, types, torch
import torch.utils._device  # what every make_inputs loads (its device context): the trials' inputs did
from evaluator.child import trials
problem = types.ModuleType("drawn")
exec("import torch\\ndef get_inputs():\\n    return [torch.randn(64, 64), torch.randint(3, 9, size=(5, 7)), "
     "torch.randint(4, (6,), dtype=torch.int32), torch.randint(3, 9, size=()), torch.randint(0, 5, (9,))]",
     problem.__dict__)
inputs = [torch.empty(64, 64), torch.empty(5, 7, dtype=torch.int64), torch.empty(6, dtype=torch.int32),
          torch.empty((), dtype=torch.int64), torch.empty(9, dtype=torch.int64)]
addresses = [t.data_ptr() for t in inputs]
loaded = len(sys.modules)
trials.refill(inputs, problem, 3, "cpu")
assert len(sys.modules) == loaded, sorted(sys.modules)[-5:]
assert [t.data_ptr() for t in inputs] == addresses
assert all(torch.equal(a, b) for a, b in zip(inputs, trials.make_inputs(problem, 3, "cpu")))
"""


def test_the_first_fill_of_drawn_inputs_loads_nothing_and_writes_in_place():
    """randn's and randint's meta kernels import 487 modules on first use: a randn problem's first refill spent
    ~1.8 s of its timing stage on the H100 host there. Their shape and dtype come from rand and empty instead,
    and the values written in place are the plain call's."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    run = subprocess.run([sys.executable, "-c", _FIRST_FILL], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_floor_is_the_larger_bound_and_half_of_it_is_impossible():
    from evaluator.verdict.speed_of_light import floor, impossible
    from evaluator.hardware import PEAKS

    matmul = floor(2 * 4096**3, 3 * 4 * 4096**2, PEAKS["H100"])  # 137 GFLOP, 201 MB
    assert matmul.bound == "flop" and matmul.exploit == "flop_floor" and abs(matmul.ms - 0.139) < 1e-3
    assert "1.37e+11 FLOP at 9.89e+14 FLOP/s need 0.139 ms; 2.01e+08 bytes at 3.35e+12 B/s need 0.0601 ms" in matmul.arithmetic
    assert impossible(0.05, matmul).startswith("median 0.05 ms is below 0.5 x the flop floor of 0.139 ms")
    assert impossible(0.08, matmul) == ""  # 1.7 PFLOP/s: beyond the datasheet, but within the factor
    assert floor(None, 2**31, PEAKS["H100"]).bound == "bandwidth"
    assert floor(None, None, PEAKS["H100"]) is None and impossible(1e-9, None) == ""


def test_the_cpu_peak_is_above_what_this_machine_reaches():
    """An honest kernel must never beat the floor: torch's best matmul, on every core, stays below the peak."""
    from evaluator.hardware import cpu_peak

    threads, a = torch.get_num_threads(), torch.randn(512, 512)
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        best = min(timeit.repeat(lambda: a @ a, number=1, repeat=10))
    finally:
        torch.set_num_threads(threads)
    assert cpu_peak().bytes_per_s is None  # no single bandwidth: it depends on the cache level
    assert 2 * 512**3 / best < cpu_peak().fastest_flops_per_s


def test_paired_ratios_cancel_what_slows_both_sides_and_separate_medians_do_not():
    """The machine slows 3x halfway (another process starts): the reference's blocks were timed half in each
    phase, the candidate's mostly in the slow one. Per-pair ratios see the true 2x; ratios of medians taken
    apart do not."""
    slow = [1.0] * 4 + [3.0] * 8
    reference = [[2.0 * s, 2.1 * s, 1.9 * s] for s in slow]
    candidate = [[1.0 * s, 1.05 * s, 0.95 * s] for s in slow]
    speedup, low, high = paired_ratio(reference, candidate)
    assert speedup == pytest.approx(2.0) and low <= speedup <= high and high - low < 1e-9
    apart = summarize([x for block in reference[:6] for x in block], "perf_counter").median_ms / \
        summarize([x for block in candidate[4:] for x in block], "perf_counter").median_ms
    assert abs(apart - 2.0) > 0.5
    with pytest.raises(ValueError):
        paired_ratio(reference, candidate[1:])  # unpaired blocks


_FAULTS = """
import resource, sys, torch
from evaluator.child.main import _steady_malloc
if sys.argv[1] == "steady":
    _steady_malloc()
x = torch.randn(64, 4096)
def eager():  # scale_bias_hardswish's reference at its small size: four 1 MiB temporaries per call
    y = x * 0.5 + 1.0
    return y * torch.clamp(y + 3.0, 0.0, 6.0) / 6.0
for _ in range(20):
    eager()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    eager()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100)
"""


def test_cpu_children_reuse_memory_instead_of_faulting_it_in_every_call():
    """glibc's malloc hands a megabyte-sized block out from fresh mmap'd pages while its adaptive threshold is
    low (forced here: that was the slow mode of the bimodal CPU speedups, ~1000 page faults per call); the
    child's fixed thresholds take it from the reused heap."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}

    def faults(mode: str) -> float:
        run = subprocess.run([sys.executable, "-c", _FAULTS, mode], env=env, capture_output=True, text=True, timeout=120)
        return float(run.stdout.strip() or run.stderr)

    assert faults("low") > 200 and faults("steady") < 5


def _keep(budget: int, asked: set[int], reps: int = 30, least: int = 20) -> tuple[dict, dict]:
    """A keeper over a timed loop of `reps` 4 KiB outputs whose parent asks for `asked`: what it handed over at
    once (label -> the tensors handed over, and the live output of that rep), and what it kept for after timing."""
    from evaluator.child.candidate import _Keeper

    rep, handed, rounds = [0], {}, []
    outputs = [torch.full((1024,), float(i)) for i in range(reps)]

    def ask(first: int, count: int, _least: int) -> list[int]:
        rounds.append(range(first, first + count))
        return [i for i in rounds[-1] if i in asked]
    keeper = _Keeper(ask, lambda tensors, label, seen: handed.update({label: tensors}), lambda: f"timed_{rep[0]}", budget)
    for i in range(reps):
        rep[0] = i
        keeper(i, least, i >= least or i % 10 == 9, outputs[i], None)  # rounds of 10 until `least`, then of one
    assert [i for r in rounds for i in r] == list(range(reps))  # every rep asked about once, in order
    live = lambda label: outputs[int(label.split("_")[1])]  # noqa: E731
    return ({label: (got, live(label)) for label, got in handed.items()},
            {label: (got.outputs, live(label)) for label, got in keeper.take().items()})


def test_asked_reps_are_kept_as_copies_taken_when_their_timer_stopped_and_handed_over_after_timing():
    """The snapshot is taken before the parent is asked, so nothing the candidate does once it knows can reach
    what is compared; what it asked for, and the last rep that may end the loop, go over once timing is done."""
    handed, kept = _keep(budget=1 << 20, asked={3, 17})
    assert handed == {} and sorted(kept) == ["timed_17", "timed_29", "timed_3"]
    for got, live in kept.values():
        assert got[0].data_ptr() != live.data_ptr() and torch.equal(got[0], live)


def test_outputs_over_the_memory_budget_are_handed_over_as_they_are_and_not_kept():
    """Four 7.5 GB snapshots ran the candidate out of GPU memory on the H100: an output over the budget is never
    copied, so an asked rep goes over at once, as it is, and no last rep is held."""
    handed, kept = _keep(budget=4096 - 1, asked={5})
    got, live = handed["timed_5"]
    assert got[0] is live and kept == {}
