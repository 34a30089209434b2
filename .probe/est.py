import sys, time, torch
sys.path.insert(0, "/work/main")
from evaluator import trials, timing
from evaluator.loading import load_problem
from reference_problems import resolve_problem
p = resolve_problem("scale_bias_hardswish"); prob = load_problem(p.path, p.meta.small)
torch.set_num_threads(1)
model = trials.build_model(prob.Model, prob, 1, "cpu")
inputs = trials.make_inputs(prob, 7, "cpu")
fresh = trials.FreshInputs(inputs, prob, 7, "cpu")
call = lambda: model(*inputs)
for name, f in (("call", call), ("fill", lambda: fresh(-1))):
    t = time.perf_counter()
    for _ in range(20): f()
    print(name, (time.perf_counter() - t) / 20 * 1e3, "ms")
with torch.no_grad():
    print("estimate", timing._estimate_ms(call, lambda: None, lambda: fresh(-2)))
for label, f in (("randn", lambda: torch.randn(64, 4096)), ("make", lambda: trials.make_inputs(prob, 5, "cpu")),
                 ("make_into", lambda: trials.make_inputs(prob, 5, "cpu", into=inputs)),
                 ("refill", lambda: trials.refill(inputs, prob, 5, "cpu", 7)), ("seed", lambda: torch.manual_seed(5))):
    t = time.perf_counter()
    for _ in range(20): f()
    print(label, (time.perf_counter() - t) / 20 * 1e3, "ms")
import cProfile, pstats
cProfile.run("for _ in range(20): fresh(-3)", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("cumulative").print_stats(12)
