"""Two fresh processes, the same eager model, paired blocks of 10 reps with fills: the ratio's spread across pairs."""
import os, subprocess, sys, statistics, json
WORKER = r'''
import sys, time, json, torch
sys.path.insert(0, "/work/main")
from evaluator import trials
from evaluator.child import _steady_malloc
from evaluator.loading import load_problem
from reference_problems import resolve_problem
torch.set_num_threads(1)
import os
if os.environ.get("PIN"): os.sched_setaffinity(0, {int(os.environ["PIN"])})
if MODE_STEADY: _steady_malloc()
p = resolve_problem("scale_bias_hardswish"); prob = load_problem(p.path, p.meta.small)
model = trials.build_model(prob.Model, prob, 1, "cpu")
inputs = trials.make_inputs(prob, 7, "cpu")
fresh = trials.FreshInputs(inputs, prob, 7, "cpu")
with torch.no_grad():
    for i in range(30): fresh(-1 - i); model(*inputs)
    for line in sys.stdin:
        first = int(line)
        out = []
        for k in range(10):
            fresh(first + k); s = time.perf_counter(); model(*inputs); out.append((time.perf_counter() - s) * 1e3)
        print(json.dumps(out), flush=True)
'''
steady = sys.argv[1] == "steady"
env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.hugetlb=1") if sys.argv[2] == "huge" else dict(os.environ)
code = WORKER.replace("MODE_STEADY", str(steady))
for trial in range(6):
    a, b = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    ratios = []
    for blk in range(40):
        outs = {}
        for name, p in (("a", a), ("b", b)) if blk % 2 else (("b", b), ("a", a)):
            p.stdin.write(f"{blk*10}\n"); p.stdin.flush(); outs[name] = json.loads(p.stdout.readline())
        ratios.append(statistics.median(outs["a"]) / statistics.median(outs["b"]))
    for p in (a, b): p.stdin.close(); p.wait()
    print(f"pair {trial}: ratio {statistics.median(ratios):.3f}", flush=True)
