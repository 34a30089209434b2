"""Where does the identical candidate's ratio come from? Per-position samples of both sides, over N runs."""
import multiprocessing, os, statistics, sys, tempfile
from pathlib import Path
ROOT = Path("/work/main"); sys.path.insert(0, str(ROOT))
from evaluator import CandidateJob, EvalSettings, evaluate
import evaluator.runner as runner
from evaluator.pacing import Pacer
from reference_problems import resolve_problem

caught = []
class Rec(Pacer):
    def __init__(self, *a, **k):
        super().__init__(*a, **k); caught.append(self)
runner.Pacer = Rec

def spin(stop):
    while not stop.is_set(): pass

def once(job, settings, hog):
    stop = multiprocessing.Event()
    p = multiprocessing.Process(target=spin, args=(stop,), daemon=True) if hog else None
    if p: p.start(); os.sched_setaffinity(p.pid, {0})
    try:
        (v,) = evaluate([job], settings)
    finally:
        stop.set(); p and p.join()
    pr = caught[-1].paired
    ref, cand = pr.reference, pr.candidate
    size = min(map(len, cand))
    pos = lambda blocks, k: statistics.median(b[k] for b in blocks if len(b) > k)
    print(f"hog={hog} {v.speedup:.3f}x pairs={len(ref)} size={size} ref_pos={[round(pos(ref,k),3) for k in range(size)]} "
          f"cand_pos={[round(pos(cand,k),3) for k in range(size)]} ref_med={v.reference.median_ms:.3f} cand_med={v.candidate.median_ms:.3f}", flush=True)

n = int(sys.argv[1]); what = sys.argv[2] if len(sys.argv) > 2 else "same"
scratch = Path(tempfile.mkdtemp(prefix="bias-"))
problem = resolve_problem("scale_bias_hardswish")
path = ROOT / ("tests/candidates/scale_bias_hardswish/same_as_reference.py" if what == "same" else "solutions/scale_bias_hardswish/cpu_fused_o3.py")
settings = EvalSettings(device="cpu", size="small", trials=3, build_root=scratch / "b", rep_ms=1000)
for i in range(n):
    once(CandidateJob(path=path, problem=problem), settings, hog=bool(i % 2))
