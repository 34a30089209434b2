"""The dispatcher check (evaluator/child/overrides.py): real registrations for operators that existed before, each made
in a fresh process after the snapshot, the candidate's own operators beside them, its cost, and the candidates
that override ATen kernels against the real evaluator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from evaluator import CandidateJob, EvalSettings, Status, evaluate
from reference_problems import resolve_problem

RELU = Path(__file__).parent / "adversarial" / "relu"

_CHANGED = """
import json, sys
import torch
from evaluator.child.overrides import Overrides
seen = Overrides()
exec(sys.argv[1])
print(json.dumps(seen.changed()))
"""


def _changed(code: str) -> list[str]:
    """What the check reports after `code` ran in a fresh process, snapshot taken just before it."""
    ran = subprocess.run([sys.executable, "-c", _CHANGED, code], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.splitlines()[-1])


_LIB = "lib = torch.library.Library('aten', 'IMPL')\n"

# registration -> what the report must contain
HOSTILE = {
    "python kernel at a backend key": (_LIB + "lib.impl('clone', lambda t, memory_format=None: t, 'CPU')",
                                       "aten::clone kernels changed (CPU: registered at <string>:"),
    "kernel replaced at a key that had one": (_LIB + "lib.impl('add.Tensor', lambda a, b, alpha=1: a, 'CPU')",
                                              "aten::add.Tensor kernels changed (CPU: registered at <string>"),
    "fallthrough at an autograd key": (_LIB + "lib.impl('sum', torch.library.fallthrough_kernel, 'AutogradCPU')",
                                       "aten::sum kernels changed (AutogradCPU: registered at <string>"),
    "alias key": (_LIB + "lib.impl('uniform_', lambda t, *a, **k: t, 'CompositeExplicitAutograd')",
                  "aten::uniform_ kernels changed (CompositeExplicitAutograd[alias]: registered at <string>"),
    "torch.library.register_kernel": ("torch.library.register_kernel('aten::random_', 'cpu', lambda t, **k: t)",
                                      "aten::random_ kernels changed (CPU: registered at "),
    "fake registration": ("torch.library.register_fake('aten::sum', lambda x, dtype=None: x.new_empty(()))",
                          "aten::sum kernels changed (Meta: registered at "),
    "autograd registration": ("torch.library.register_autograd('aten::clone', lambda ctx, g: g)",
                              "aten::clone kernels changed (Autograd[alias]: registered at "),
    "another namespace": ("lib = torch.library.Library('prims', 'IMPL')\nlib.impl('sin', torch.sin, 'CPU')",
                          "prims::sin kernels changed (CPU: registered at <string>"),
    "torch's own registration removed": (
        "import torch._functorch.predispatch as p\np.VMAP_DECOMPOSITIONS_LIB._destroy()",
        "aten::mse_loss_backward kernels changed (removed FuncTorchBatched: "),
    "backend fallback": (
        "lib = torch.library.Library('_', 'IMPL')\nlib.fallback(lambda *a, **k: None, dispatch_key='CPU')",
        "backend fallback added at CPU"),
    "Python dispatcher left on": ("keep = torch._C._EnablePythonDispatcher()",
                                  "dispatch keys of the harness's thread changed from included DispatchKeySet("),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_registration_for_an_existing_operator_is_reported(name):
    code, expected = HOSTILE[name]
    found = _changed(code)
    assert any(expected in item for item in found), found


# the candidate's own operators, and what torch itself registers when an honest candidate uses them
HONEST = {
    "custom op of its own, called": (
        "@torch.library.custom_op('mylib::relu', mutates_args=())\n"
        "def relu(x: torch.Tensor) -> torch.Tensor:\n    return x.clamp(min=0)\n"
        "relu.register_fake(lambda x: torch.empty_like(x))\n"
        "relu(torch.randn(4))\nassert 'torch._dynamo' in sys.modules"),
    "library of its own": (
        "lib = torch.library.Library('mylib', 'DEF')\nlib.define('twice(Tensor x) -> Tensor')\n"
        "lib.impl('twice', lambda x: x * 2, 'CPU')\ntorch.ops.mylib.twice(torch.randn(3))"),
    "torch.func": (
        "torch.func.vmap(torch.sin)(torch.randn(3, 4))\ntorch.func.grad(lambda x: x.sin().sum())(torch.randn(3))"),
    "autocast and inference mode, entered and left": (
        "with torch.autocast('cpu'), torch.inference_mode():\n    torch.randn(3) @ torch.randn(3)"),
}


@pytest.mark.parametrize("name", HONEST)
def test_the_candidates_own_operators_are_not_reported(name):
    assert _changed(HONEST[name]) == []


@pytest.mark.slow
def test_torch_compile_is_not_reported():
    """Inductor compiles C++ here: torch registers kernels of its own as it loads (torch.distributed's)."""
    assert _changed("f = torch.compile(lambda x: torch.relu(x) * 2)\nf(torch.randn(8))") == []


_COST = """
import json, time
import torch
from evaluator.child.overrides import Overrides
start = time.perf_counter()
seen = Overrides()
snapshot = time.perf_counter() - start
checks = []
for _ in range(5):
    start = time.perf_counter()
    seen.changed()
    checks.append(time.perf_counter() - start)
work = []
for _ in range(5):  # a fixed amount of plain Python work, timed the same way: how fast this machine is right now
    start = time.perf_counter()
    sum(i * i for i in range(1_000_000))
    work.append(time.perf_counter() - start)
print(json.dumps({"snapshot": snapshot, "check": min(checks), "work": min(work), "operators": len(seen._ops)}))
"""


def test_a_check_costs_tens_of_milliseconds():
    """It runs after import, __init__ and each stage: six times per candidate process (~50 ms each here, 2 cores
    shared; the least of five is taken, as other work on the machine only adds). Measured against a fixed piece of
    Python work timed the same way (~40 ms on a quiet core), so a loaded machine slows both alike."""
    ran = subprocess.run([sys.executable, "-c", _COST], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True)
    cost = json.loads(ran.stdout)
    print(cost)
    assert cost["operators"] > 3000  # every namespace, not ATen alone
    assert cost["check"] < 3 * cost["work"] and cost["snapshot"] < 6 * cost["work"], cost


_GUARDED = """
import torch
import evaluator.child.overrides
from evaluator.child.guard import Guard, harness_modules
guard = Guard(harness_modules())
lib = torch.library.Library('aten', 'IMPL')
lib.impl('copy_', lambda dst, src, non_blocking=False: dst, 'CPU')
print(guard.violations())
evaluator.child.overrides._dump = lambda name: ''
print(guard.violations()[0])
"""


def test_the_guard_names_the_operator_and_watches_the_check_itself():
    ran = subprocess.run([sys.executable, "-c", _GUARDED], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True)
    registered, rebound = ran.stdout.splitlines()
    assert registered.startswith("['aten::copy_ kernels changed (CPU: registered at <string>:"), registered
    assert rebound == "evaluator.child.overrides._dump"


# candidate -> (status, exploit, text the cause must contain)
EXPECTED = {
    "aten_override": (Status.CHEAT, "judge_tampering", "during serving: aten::"),  # its last check, on CPU
    "aten_override_native": (Status.CHEAT, "judge_tampering", "during serving: aten::"),
    "own_op": (Status.CORRECT, "", "correct in 3 trials"),
}


@pytest.fixture(scope="module")
def verdicts(adversarial_build_root):
    from tests.adversarial.prebuilt import prebuild

    prebuild(adversarial_build_root, "tests.adversarial.relu.aten_override_native")
    settings = EvalSettings(device="cpu", size="small", trials=3, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2,
                            build_root=adversarial_build_root)
    relu = resolve_problem("relu")
    jobs = [CandidateJob(path=RELU / f"{name}.py", problem=relu) for name in EXPECTED]
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, settings)}


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_an_aten_kernel_override_is_cheat_and_an_own_operator_is_correct(verdicts, name):
    """With the check off, both overrides were `correct` (forward returns an empty tensor; the kernels the
    harness runs on it afterwards write the ReLU), about 25x faster than the honest kernel they call."""
    status, exploit, text = EXPECTED[name]
    v = verdicts[name]
    assert (v.status, v.evidence.exploit) == (status, exploit), v.evidence
    assert text in v.evidence.cause, v.evidence.cause
    if status is Status.CHEAT:
        assert "aten::clone kernels changed (CPU: registered at " in v.evidence.cause, v.evidence.cause
        assert "aten::detach kernels changed (CPU: registered at " in v.evidence.cause, v.evidence.cause
