import sys, time, statistics, torch, os
sys.path.insert(0, "/work/main")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/same_ext")
from evaluator import trials
from evaluator.loading import load_problem, import_file
from reference_problems import resolve_problem
from pathlib import Path
torch.set_num_threads(1)
p = resolve_problem("scale_bias_hardswish"); prob = load_problem(p.path, p.meta.small)
mod = import_file(Path("/work/main/tests/candidates/scale_bias_hardswish/same_as_reference.py"), "cand")
ref = trials.build_model(prob.Model, prob, 1, "cpu"); cand = trials.build_model(mod.ModelNew, prob, 1, "cpu")
x = trials.make_inputs(prob, 7, "cpu")[0]
def t(m, n=10):
    out = []
    for _ in range(n):
        s = time.perf_counter(); m(x); out.append((time.perf_counter() - s) * 1e3)
    return statistics.median(out)
with torch.no_grad():
    for m in (ref, cand): t(m, 50)
    rs, cs = [], []
    for _ in range(40):
        rs.append(t(ref)); cs.append(t(cand))
print("ref", statistics.median(rs), "cand", statistics.median(cs), "ratio", statistics.median(r / c for r, c in zip(rs, cs)))
