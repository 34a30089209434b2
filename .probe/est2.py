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
for r in range(4):
  for name, f in (("call", call), ("fill", lambda: fresh(-1)), ("fill_rep", lambda: fresh(5))):
    ts = []
    for _ in range(20):
        t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1e3)
    print(name, [round(x, 2) for x in ts[:6]], round(sorted(ts)[10], 2))
