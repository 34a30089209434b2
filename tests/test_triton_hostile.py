"""Hostile Triton candidates (tests/candidates/triton/relu/, README there) judged on CPU through `evaluate`, each
getting the verdict its CUDA/C++ twin gets:

- cache_by_identity caches its outputs per input tensor, as tests/adversarial/relu/cache_by_identity.py does:
  `cheat` (`stale_output`), the timed call named (tests/test_reward_hacking.py);
- slow_autotune autotunes for minutes, as a compile that would run for minutes: `timeout`, the cause naming the
  budget it ran past and the stage, as the compile child's idle budget does (tests/test_budgets.py); here the
  budget is the autotuner's, derived from each config's own calls, and the cause says what the autotuning cost;
- poison_cache plants garbage entries for honest.py's kernel in every Triton cache it can name (honest.py's build,
  whose key it computes; the build root; ~/.triton/cache), as the build-cache attacker of tests/test_sandbox.py
  plants files in the build cache: its writes are refused, it stays `correct`, and honest.py judged after it is
  `correct`, every Triton cache free of its garbage. Run by hand with its writes recorded, each was refused but the
  one in its own scratch; with its candidate child unjailed, honest.py was `compile_error` (its GPU-target compile
  read the planted metadata: JSONDecodeError), in the same batch and the next.

The fourth, calling PyTorch instead of launching its kernel, is relu/unlaunched.py (tests/test_triton_judged.py).
An interpreted relu costs seconds a call on this machine: one batch, two trials, short timing."""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="Triton candidates need the triton package (the dev extra installs it)")

from conftest import CANDIDATES  # noqa: E402
from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate  # noqa: E402
from reference_problems import resolve_problem  # noqa: E402
from test_reward_hacking import EXPECTED as TWINS  # noqa: E402 - the C++ twins' verdicts

RELU = CANDIDATES / "triton" / "relu"
HOSTILE = ["cache_by_identity", "poison_cache", "slow_autotune"]
POISON = b"{kforge-poisoned"  # what poison_cache.py writes for a kernel's metadata


def _jobs(*names: str) -> list[CandidateJob]:
    relu = resolve_problem("relu")
    return [CandidateJob(path=RELU / f"{name}.py", problem=relu) for name in names]


@pytest.fixture(scope="module")
def verdicts(build_root) -> dict[str, Verdict]:
    """The hostile ones beside honest.py (on CPU every build is published before any candidate runs, so the
    poisoner finds honest.py's); then, surely after the poisoner, honest.py again and the honest autotuner
    (untimed: their kernels' verdicts are what matter)."""
    settings = EvalSettings(device="cpu", size="small", trials=2, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2,
                            build_root=build_root, cpu_pairs=1, forward_server=False)  # as its C++ twin is judged
    found = {Path(v.solution_path).stem: v for v in evaluate(_jobs(*HOSTILE, "honest"), settings)}
    after = evaluate(_jobs("honest", "autotuned"), settings.model_copy(update={"timing": False}))
    return found | {f"{Path(v.solution_path).stem}_after": v for v in after}


def test_an_output_cache_is_stale_output_as_its_cpp_twin(verdicts):
    status, exploit, text = TWINS["cache_by_identity"]
    v = verdicts["cache_by_identity"]
    assert (v.status, v.evidence.exploit) == (status, exploit), v.evidence
    assert text in v.evidence.cause and re.search(r"^(cheat: )?timed call \d+ \(after the trials passed\)", v.evidence.cause)


def test_autotuning_for_minutes_is_a_timeout_that_names_its_budget_and_cost(verdicts):
    v = verdicts["slow_autotune"]
    assert (v.status, v.evidence.exploit, v.candidate) == (Status.TIMEOUT, "", None), v.evidence
    cause = v.evidence.cause
    assert cause.startswith("autotuning relu_kernel ran past its budget: config {'BLOCK': 32768} benchmarked for "), cause
    assert "0 of its 8 configs benchmarked before it" in cause and cause.endswith("(stage: correctness)"), cause


def test_an_honest_autotuning_is_costed_before_any_timing(verdicts):
    v = verdicts["autotuned_after"]
    assert v.status is Status.CORRECT, v.evidence
    assert any(n.startswith("autotuned before timing, never timed: relu_kernel over 2 config(s) in ") for n in v.evidence.notes)
    assert 0 < v.evidence.stage_s["of_which_autotune"] < v.evidence.stage_s["correctness"], v.evidence.stage_s


def _poisoned(caches: list[Path]) -> list[str]:
    return [str(p) for cache in caches for p in cache.glob("*/*.json") if p.read_bytes().startswith(POISON)]


def test_a_triton_cache_poisoner_reaches_no_other_candidate(verdicts, build_root):
    v = verdicts["poison_cache"]
    assert v.status is Status.CORRECT, v.evidence  # its refused writes leave it correct, as its twin
    assert v.evidence.sandbox.get("cache", "").startswith("on"), v.evidence.sandbox
    for name in ("honest", "honest_after"):
        assert verdicts[name].status is Status.CORRECT, verdicts[name].evidence
    homes = {Path(pwd.getpwuid(os.getuid()).pw_dir), Path("/root")}
    caches = [build_root / "triton", *build_root.glob("*/triton"), *(home / ".triton" / "cache" for home in homes)]
    assert _poisoned(caches) == []
