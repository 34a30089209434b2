import sys, tempfile, json
from pathlib import Path
sys.path.insert(0, "/work/main")
from evaluator import CandidateJob, EvalSettings, evaluate
from reference_problems import resolve_problem
problem = resolve_problem("scale_bias_hardswish")
settings = EvalSettings(device="cpu", size="small", trials=3, build_root=Path(tempfile.mkdtemp()) / "b", rep_ms=1000)
for v in evaluate([CandidateJob(path=Path("/work/main/tests/candidates/scale_bias_hardswish/same_as_reference.py"), problem=problem)], settings):
    t = v.evidence.timing
    print(v.speedup, t.calls, t.untimed_calls, v.evidence.stage_s, v.candidate.median_ms, v.reference.median_ms)
