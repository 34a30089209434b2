"""Blame where it belongs: kforge's own step in the candidate's child (the copy of a timed call's outputs) running out
of memory is kforge's failure (`kforge_error`, the step and the limit in words), not the candidate's
runtime_error; and the child's word for it counts only for a candidate its trials showed correct, so a wrong one
cannot hide behind a forged claim. Real children, under a real address-space limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.contracts import Limits
from reference_problems.registry import load_problem_file

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 512
dim = 16384  # 32 MiB in and out


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


KFORGE_META = {"name": "wide_relu"}
'''

# honest outputs; from its fourth call on (the three trials are over) it leaves less address space free than one
# more copy of them needs, so the copy kforge makes of each timed call's outputs cannot be made
CROWDED = '''import re
import resource

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


def free_bytes():
    used = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
    return resource.getrlimit(resource.RLIMIT_AS)[0] - used


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.held = 0, None

    def forward(self, x):
        self.held = None
        self.calls += 1
        y = ext.relu(x)
        if self.calls > 3:
            self.held = torch.empty(max(free_bytes() - y.numel() * y.element_size() // 2, 0), dtype=torch.uint8)
        return y
'''

# a forged claim of kforge's failure: by a wrong candidate once its trials are over, and by one before any trial
FORGED = '''import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class KforgeFailure(RuntimeError):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > AFTER:
            raise KforgeFailure("kforge's own copy of the outputs (1 GB) failed: out of memory")
        return ext.relu(x) + OFFSET
'''


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, adversarial_build_root) -> dict:
    root = tmp_path_factory.mktemp("blame")
    (root / "wide_relu.py").write_text(PROBLEM)
    problem = load_problem_file(root / "wide_relu.py")
    files = {"crowded.py": CROWDED, "forged_when_wrong.py": FORGED.replace("AFTER", "3").replace("OFFSET", "1.0"),
             "forged_first.py": FORGED.replace("AFTER", "0").replace("OFFSET", "0.0")}
    for name, text in files.items():
        (root / name).write_text(text)
    settings = EvalSettings(device="cpu", size="full", trials=3, leak_calls=2, warmup_ms=10, rep_ms=50, min_reps=3,
                            max_reps=50, cpu_pairs=1, build_root=adversarial_build_root, jobs=1,
                            limits=Limits(memory_mb=3072, timeout_s=300),
                            forward_server=False)  # the harness that copies outputs in the child, as on CUDA
    jobs = [CandidateJob(path=root / name, problem=problem) for name in files]
    return {Path(v.solution_path).name: v for v in evaluate(jobs, settings)}


def test_kforge_running_out_of_memory_copying_outputs_is_its_own_failure(verdicts):
    v = verdicts["crowded.py"]
    assert v.status is Status.KFORGE_ERROR and v.status.kforge_failed and not v.status.judged, v.evidence
    cause = v.evidence.cause
    assert cause.startswith("kforge's own copy of the outputs (0.0336 GB) failed: out of memory under the child's "), cause
    assert "kforge's failure, not the candidate's (its trials had passed)" in cause and v.evidence.stage == "timed"


def test_a_forged_claim_of_kforge_failure_hides_no_failure(verdicts):
    wrong, first = verdicts["forged_when_wrong.py"], verdicts["forged_first.py"]
    assert wrong.status is Status.INCORRECT, wrong.evidence
    assert first.status is Status.RUNTIME_ERROR, first.evidence
    assert first.evidence.cause.endswith("before the candidate's trials passed: counted as its run's failure")
