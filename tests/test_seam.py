"""judging.judge_and_store, the one seam the CLI and the agent loop judge and store through, on a real SQLite file
with the real evaluator on CPU: code is stored once, a stored verdict is reused instead of evaluating again (never
one of kforge's own failures), twins in a batch are evaluated once, a caller's own verdict is stored as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import Database
from db.standings import CORRECT
from evaluator.contracts import CandidateJob, Evidence, Status, Verdict
from evaluator.hardware import device_name
from judging.judge import Submission, judge_and_store
from judging.record import record_solution, record_verdict
from pipeline.dedupe import normalized_sha256
from reference_problems import resolve_problem

PY_ONLY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """No compiled extension: judged (a cheat) without a compile."""

    def forward(self, x):
        return torch.relu(x)
'''


def submission(folder: Path, name: str, code: str, **fields) -> Submission:
    path = folder / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code)
    return Submission(job=CandidateJob(path=path, problem=resolve_problem("relu")), **fields)


def judge(database: Database, submissions: list[Submission], settings, **kw) -> tuple[list, list[int]]:
    """(every Judged, the sizes on_evaluate heard)."""
    heard: list[int] = []
    return list(judge_and_store(database, submissions, settings, on_evaluate=heard.append, **kw)), heard


def test_code_is_stored_evaluated_once_then_its_verdict_reused(tmp_path, database, settings):
    sub = submission(tmp_path, "plain", PY_ONLY, origin="generated", model="m")
    [first], heard = judge(database, [sub], settings)
    assert heard == [1] and not first.reused and first.job is sub.job
    assert first.verdict.status is Status.CHEAT and "no kernel of its own" in first.verdict.evidence.cause
    stored = database.get_solution(sub.job.sha256)
    assert (stored.origin, stored.model, stored.source) == ("generated", "m", PY_ONLY)
    assert [e.id for e in database.evaluations("relu")] == [first.evaluation_id]

    [again], heard = judge(database, [sub], settings)
    assert heard == [] and again.reused and again.evaluation_id == first.evaluation_id
    (row,) = database.evaluations("relu")
    assert again.reused_from == (row.id, row.created_at, sub.job.sha256) and first.reused_from is None
    assert again.verdict.model_dump(exclude={"evidence"}) == first.verdict.model_dump(exclude={"evidence"})
    assert len(database.evaluations("relu")) == 1 and len(database.solutions("relu")) == 1

    [rerun], heard = judge(database, [sub], settings, rerun=True)
    assert heard == [1] and not rerun.reused and rerun.evaluation_id != first.evaluation_id
    assert len(database.evaluations("relu")) == 2

    from evaluator.languages import Language

    [as_triton], heard = judge(database, [sub], settings.model_copy(update={"language": Language.TRITON}))
    assert heard == [1] and not as_triton.reused  # judged as another language than the stored verdicts were
    assert as_triton.verdict.evidence.language == "triton" and "no Triton kernel defined" in as_triton.verdict.evidence.cause


def test_twins_are_evaluated_once_and_a_callers_verdict_is_stored_as_it_is(tmp_path, database, settings):
    twin_code = PY_ONLY.replace("    def forward", "    # reformatted\n\n    def  forward")
    plain, twin = (submission(tmp_path, name, code, normalized_sha256=normalized_sha256(code))
                   for name, code in (("plain", PY_ONLY), ("twin", twin_code)))
    cut = submission(tmp_path, "cut", "import torch\nsrc = '''\n")
    cut.verdict = Verdict(status=Status.TRUNCATED, problem="relu", solution_sha256=cut.job.sha256,
                          solution_path=str(cut.job.path), device="cpu", device_name=device_name("cpu"),
                          size=settings.size, evidence=Evidence(stage="parse", cause="cut off"))
    judged, heard = judge(database, [plain, cut, twin], settings)
    assert heard == [1]  # the twin takes the plain one's verdict; the cut answer is not evaluated
    by_job = {j.job.path.stem: j for j in judged}
    assert [j.job.path.stem for j in judged] == ["cut", "plain", "twin"]  # the caller's verdict first: nothing to wait for
    assert by_job["cut"].verdict is cut.verdict and not by_job["cut"].reused
    assert by_job["twin"].verdict is by_job["plain"].verdict and by_job["twin"].reused
    assert by_job["twin"].evaluation_id == by_job["plain"].evaluation_id
    assert by_job["twin"].reused_from[::2] == (by_job["plain"].evaluation_id, plain.job.sha256)  # whose verdict it is
    assert sorted(e.status for e in database.evaluations("relu")) == ["cheat", "truncated"]
    assert {s.sha256 for s in database.solutions("relu")} == {plain.job.sha256, twin.job.sha256, cut.job.sha256}

    later_code = twin_code.replace("# reformatted", "# again")
    later = submission(tmp_path, "later", later_code, normalized_sha256=normalized_sha256(later_code))
    [reused], heard = judge(database, [later], settings)  # a twin stored before counts too
    assert heard == [] and reused.reused and reused.evaluation_id == by_job["plain"].evaluation_id
    stored = next(e for e in database.evaluations("relu") if e.id == reused.evaluation_id)
    assert reused.reused_from == (stored.id, stored.created_at, plain.job.sha256)
    assert len(database.evaluations("relu")) == 2


def test_a_kforge_failure_is_never_reused(tmp_path, database, settings):
    sub = submission(tmp_path, "plain", PY_ONLY)
    record_solution(database, sub.job)
    failed = Verdict(status=Status.REFERENCE_ERROR, problem="relu", solution_sha256=sub.job.sha256, device="cpu",
                     device_name=device_name("cpu"), size=settings.size)
    failed_id = record_verdict(database, failed)
    [judged], heard = judge(database, [sub], settings)
    assert heard == [1] and not judged.reused and judged.evaluation_id != failed_id
    assert judged.verdict.status is Status.CHEAT


def test_lineage_is_stored_with_the_code_and_never_loops(tmp_path, database, settings):
    """A parent is named for code stored the first time only, and the LLM call that wrote the code is linked."""
    def cut(name: str, code: str, **fields) -> Submission:
        sub = submission(tmp_path, name, code, **fields)
        sub.verdict = Verdict(status=Status.TRUNCATED, problem="relu", solution_sha256=sub.job.sha256, device="cpu",
                              device_name=device_name("cpu"), size=settings.size)
        return sub

    parent = cut("parent", "# parent\n")
    list(judge_and_store(database, [parent], settings))
    call = database.add_generation(problem="relu", request_hash="h", provider="p", model="m", prompt=[], response="r")
    child = cut("child", "# child\n", parent_sha256=parent.job.sha256, generation_id=call)
    same = cut("same", "# parent\n", parent_sha256=parent.job.sha256)  # the answer repeats its parent's code
    list(judge_and_store(database, [child, same], settings))
    assert database.get_solution(child.job.sha256).parent_sha256 == parent.job.sha256
    assert database.get_solution(parent.job.sha256).parent_sha256 is None
    assert database.get_generation(call).solution_sha256 == child.job.sha256


@pytest.mark.parametrize("status, judged, reusable, kforge_failed", [
    (Status.CORRECT, True, True, False),
    (Status.CHEAT, True, True, False),
    (Status.TRUNCATED, True, True, False),
    (Status.SKIPPED, False, True, False),
    (Status.REFERENCE_ERROR, False, False, True),
])
def test_statuses_carry_their_sets(status, judged, reusable, kforge_failed):
    assert (status.judged, status.reusable, status.kforge_failed) == (judged, reusable, kforge_failed)


def test_the_db_stores_the_status_names_the_evaluator_gives():
    assert CORRECT == Status.CORRECT.value
