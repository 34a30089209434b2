"""--precision as KernelBench defines it: floating-point inputs and both models cast to fp16/bf16, KernelBench's
half-precision tolerance, the precision stored with the verdict and kept apart on the boards and in reuse."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
import torch
from alembic import command

from conftest import CANDIDATES
from db import Database
from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.child import guard, trials
from evaluator.child.loading import load_problem
from judging.record import record_solution, record_verdict
from judging.reuse import stored_verdict
from prompts.render import render_prompt
from reference_problems import resolve_problem
from test_migrations import insert_rows, old_run, run_on, sql

PRECISION = CANDIDATES / "precision"


@pytest.fixture
def half():
    """This process's trials at bf16, as a child's request sets it; fp32 again afterwards."""
    trials.set_precision("bf16")
    yield
    trials.set_precision("fp32")


@pytest.fixture(scope="module")
def judged(cpu_settings) -> dict[tuple[str, str], object]:
    """relu judged at bf16 (the dtype-true candidate and the one that returns float32, in one batch) and at fp16."""
    relu = resolve_problem("relu")
    found = {}
    for precision, names in (("bf16", ("relu_any_dtype", "relu_returns_fp32")), ("fp16", ("relu_any_dtype",))):
        jobs = [CandidateJob(path=PRECISION / f"{n}.py", problem=relu) for n in names]
        settings = cpu_settings.model_copy(update={"precision": precision, "rep_ms": 100})
        found |= {(Path(v.solution_path).stem, precision): v for v in evaluate(jobs, settings)}
    return found


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_half_precision_kernel_is_judged_correct_at_kernelbench_tolerance(judged, precision):
    v = judged[("relu_any_dtype", precision)]
    assert v.status is Status.CORRECT, v.evidence
    assert v.precision == precision and v.evidence.precision == precision
    assert (v.evidence.atol, v.evidence.rtol) == (1e-2, 1e-2)  # KernelBench's, over relu's own 1e-4


def test_a_float32_output_where_the_reference_gives_bf16_is_incorrect(judged):
    """The comparer holds dtypes exact (evaluator/child/correctness.py): a float32 output of a bf16 reference is
    incorrect, as KernelBench's allclose of two dtypes fails the trial."""
    v = judged[("relu_returns_fp32", "bf16")]
    assert v.status is Status.INCORRECT, v.evidence
    assert "dtype torch.float32 != expected torch.bfloat16" in v.evidence.mismatch.reason


def test_inputs_and_models_are_cast_as_kernelbench_casts_them(half):
    problem = load_problem(resolve_problem("relu").path, {"batch_size": 2, "dim": 8})
    (x,) = trials.make_inputs(problem, 7, "cpu")
    assert x.dtype == torch.bfloat16
    assert torch.equal(x, trials.cast(torch.manual_seed(7) and torch.randn(2, 8)))  # made in float32, then cast
    assert trials.cast(torch.arange(3)).dtype == torch.int64  # integer tensors untouched
    model = trials.build_model(torch.nn.Linear, type("P", (), {"get_init_inputs": staticmethod(lambda: [4, 2])}), 0, "cpu")
    assert model.weight.dtype == torch.bfloat16


def test_a_refill_writes_into_the_same_half_tensors(half):
    """Made in float32 and cast, a refill's values cannot be written by `out=` into a bf16 tensor: they are copied
    into the tensors already there, never swapped for new (or float32) ones."""
    problem = load_problem(resolve_problem("relu").path, {"batch_size": 2, "dim": 8})
    inputs = trials.make_inputs(problem, 1, "cpu")
    held, address = inputs[0], inputs[0].data_ptr()
    trials.refill(inputs, problem, 2, "cpu")
    assert inputs[0] is held and held.data_ptr() == address and held.dtype == torch.bfloat16
    assert torch.equal(held, trials.make_inputs(problem, 2, "cpu")[0])


def test_the_guard_holds_the_childs_precision(half):
    judge = guard.Guard([trials])
    trials.dtype = torch.float32  # what a candidate would do to be fed float32 inputs
    assert "evaluator.child.trials.dtype" in judge.violations(dispatcher=False)


def test_the_prompt_names_the_dtype_and_its_tolerance():
    relu = resolve_problem("relu")
    prompt = render_prompt(relu, "cpu", "small", "bf16")
    assert "evaluated at bfloat16 precision" in prompt and "contiguous bfloat16 CPU tensors" in prompt
    assert "1e-2" in prompt or "0.01" in prompt
    assert "precision" not in render_prompt(relu, "cpu", "small")


def _stored(db: Database, sha: str, precision: str, speedup: float) -> None:
    db.upsert_problem("relu", 1, "p", "h")
    db.upsert_solution(sha, "relu", "s")
    db.add_evaluation(sha, status="correct", device="cpu", device_name="cpu", size="small", precision=precision,
                      speedup=speedup)


def test_fp32_and_bf16_never_share_a_board_nor_a_reused_verdict(tmp_path):
    with Database(f"sqlite:///{tmp_path / 'k.db'}") as db:
        _stored(db, "fast-bf16", "bf16", 5.0)
        _stored(db, "slow-fp32", "fp32", 1.5)
        (fp32,) = db.leaderboard(precision="fp32")
        (bf16,) = db.leaderboard(precision="bf16")
        assert (fp32.best_sha256, fp32.best_precision, fp32.evaluations_by_status) == ("slow-fp32", "fp32", {"correct": 1})
        assert (bf16.best_sha256, bf16.best_speedup, bf16.best_precision) == ("fast-bf16", 5.0, "bf16")
        assert db.geomean_speedup(precision="fp32") == pytest.approx(1.5)
        job = CandidateJob(path=PRECISION / "relu_any_dtype.py", problem=resolve_problem("relu"))
        at = {p: EvalSettings(device="cpu", size="small", precision=p) for p in ("fp32", "bf16")}
        record_solution(db, job)
        record_verdict(db, _fresh_verdict(job, at["bf16"]))
        assert stored_verdict(db, job, at["bf16"]).precision == "bf16"
        assert stored_verdict(db, job, at["fp32"]) is None  # judged at bf16 only: fp32 judges it anew


def _fresh_verdict(job, settings):
    from evaluator.contracts import Verdict

    return Verdict.of(job, settings, Status.CORRECT, speedup=2.0)


def test_the_migration_keeps_older_rows_at_fp32(sqlite_url):
    run_on(sqlite_url, command.upgrade, "0004")
    at = datetime(2024, 1, 1)
    insert_rows(sqlite_url, "problems", [dict(name="relu", level=1, path="p", sha256="h", created_at=at)])
    insert_rows(sqlite_url, "solutions", [dict(sha256="a", problem_id=1, source="s", origin="seed", created_at=at)])
    insert_rows(sqlite_url, "evaluations", [old_run(1, "correct", 2.0)])
    insert_rows(sqlite_url, "evaluation_tallies", [dict(problem_id=1, device_name="H100", size="full", status="correct",
                                                        n=1, best_id=1)])
    insert_rows(sqlite_url, "archive_cells", [dict(problem_id=1, device_name="H100", size="full", island=0, cell="c",
                                                   solution_id=1, speedup=2.0, updated_at=at)])
    with Database(sqlite_url) as db:
        assert db.find_evaluation("a", "H100", "full").precision == "fp32"
        assert db.find_evaluation("a", "H100", "full", precision="bf16") is None
        assert [c.precision for c in db.archive("relu", "H100", "full")] == ["fp32"]
        (row,) = db.leaderboard(precision="fp32")
        assert (row.best_sha256, row.best_precision) == ("a", "fp32")
        db.add_evaluation("a", status="correct", device="cuda", device_name="H100", precision="bf16", speedup=4.0)
        assert db.leaderboard(precision="fp32")[0].best_speedup == 2.0
    assert sql(sqlite_url, "SELECT precision, n FROM evaluation_tallies ORDER BY precision") == [("bf16", 1), ("fp32", 1)]
