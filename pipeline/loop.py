"""The agent loop: sample N candidates, judge them as they arrive, feed back what failed, refine a parent, store
everything. On a GPU, each round's best correct candidate is profiled with Nsight Compute (evaluator.profile) and
its metrics go into the refine prompts of the samples that refine it.
Parents are the problem's best (or latest failure), or, with an archive, drawn per sample from its island
(pipeline/archive.py). With several models or temperatures, a bandit picks who answers each sample
(pipeline/bandit.py).
Every paid call goes through the run's budget meter (pipeline/budget.py); a resumed run takes back the answers it
already paid for by (problem, turn, sample)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from db import Database
from evaluator import CandidateJob, EvalSettings, Evidence, Profile, Status, Verdict, profile
from evaluator.hardware import device_name
from judging.judge import Judged, Submission
from judging.stream import StreamJudge
from judging.record import register_problem, write_candidate
from pipeline import cache
from pipeline.archive import Archive, ArchiveConfig, Pick, island_of
from pipeline.bandit import Bandit, BanditConfig, improvement
from pipeline.budget import Budget, BudgetExhausted, Meter
from pipeline.dedupe import normalized_sha256
from pipeline.extract import VERDICT_STATUS, Extraction, extract
from pipeline.llm import LLMError, LLMRequest, LLMResponse, Provider, Usage
from pipeline.parents import Parent, Slot, parent_of, program_of, select_parent
from pipeline.retrieval import RetrievalConfig, related
from prompts import Turn, chat_messages, crossover_messages
from reference_problems import Problem

DEFAULT_OUT = Path.home() / ".kforge" / "generations"
STATUS_RANK = {status: rank for rank, status in enumerate(Status)}  # Status is ordered by how far a candidate got


class RunConfig(BaseModel):
    samples: int = Field(1, ge=1)
    turns: int = Field(1, ge=1)  # rounds: the first sampling, then turns - 1 rounds of feedback
    concurrency: int = Field(4, ge=1)  # LLM calls in flight
    out_dir: Path = DEFAULT_OUT
    temperature: float | None = None
    max_tokens: int | None = None
    budget: Budget = Field(default_factory=Budget)
    archive: ArchiveConfig | None = None  # None: every sample of a turn refines the problem's best or latest failure
    retrieval: RetrievalConfig | None = None  # None: a problem's first prompts show no kernels of other problems
    sol_stop: float | None = Field(0.9, gt=0, le=1)  # a problem is done once a kernel reaches this fraction of the
    # speed of light (evaluator.contracts.SpeedOfLight); None: never
    bandit: BanditConfig = Field(default_factory=BanditConfig)  # how several models or temperatures share requests
    profile: bool = True  # on CUDA: profile each round's best correct candidate with ncu for the next refine prompt
    fresh: bool = Field(False, exclude=True)  # ask the server even where the db holds an answer to the same request
    # (still stored); asked of one invocation, never stored with the run


class Candidate(BaseModel):
    problem: str
    turn: int
    sample: int
    generation_id: int
    cached: bool  # an answer stored before (by an earlier run, or this one before --resume): no call was made for it
    model: str
    arm: int = 0
    usage: Usage
    cost_usd: float | None = None
    extraction: Extraction
    path: Path | None = None
    verdict: Verdict | None = None  # None only when the answer had no code
    parent_sha256: str | None = None
    island: int | None = None
    duplicate_of: str | None = None  # the evaluated solution whose normalized code this one repeats
    taken_back: bool = False  # this run's answer from before it was resumed (--resume), not a new one

    @property
    def status(self) -> str:
        return self.verdict.status.value if self.verdict else self.extraction.status.value

    def rank(self) -> tuple:
        """Higher is better: correct and fast first, then how far the candidate got; on a tie the evaluated
        original before a near-duplicate's file (which was never run itself), then the later turn."""
        if self.verdict is None:
            return (-1, 0.0, False, self.turn)
        return (STATUS_RANK[self.verdict.status], self.verdict.speedup or 0.0, self.duplicate_of is None, self.turn)


class RunResult(BaseModel):
    problem: str
    candidates: list[Candidate] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    stopped: str | None = None  # the budget limit that ended the run
    reached: str | None = None  # why the problem was done before its turns ran out (a kernel near the speed of light)
    profiles: dict[str, str] = Field(default_factory=dict)  # sha256 -> what its Nsight Compute profile gave, in words
    migrations: list[tuple[int, int, str]] = Field(default_factory=list)  # (from island, to island, sha256)

    def best(self) -> Candidate | None:
        return max(self.candidates, key=Candidate.rank, default=None)


Events = Callable[[str, Candidate], None]  # ("answered" | "judged", candidate)


class Loop:
    """One run against one problem at a time: every call, candidate and verdict goes to the db as it happens. With
    run_id, calls are recorded as the run's and a resumed run takes back the answers it already paid for."""

    def __init__(self, provider: Provider | list[Provider], database: Database, settings: EvalSettings,
                 config: RunConfig, events: Events | None = None, run_id: int | None = None,
                 meter: Meter | None = None) -> None:
        self.database, self.settings, self.config = database, settings, config
        providers = provider if isinstance(provider, list) else [provider]
        self.bandit = Bandit.over(providers, config.temperature, config.bandit)
        self.events = events or (lambda kind, candidate: None)
        self.run_id = run_id
        self.meter = meter or Meter(config.budget)
        self.profiles: dict[str, Profile] = {}  # sha256 -> its Nsight Compute profile (advice for the prompts only)
        self._drawn_lock = threading.Lock()  # a turn's answers, read by the judge's thread as verdicts come

    def run(self, problem: Problem) -> RunResult:
        register_problem(self.database, problem)
        result = RunResult(problem=problem.name)
        archive = self._archive(problem)
        best = self._known_best(problem) if self.bandit.learning else 0.0
        for turn in range(self.config.turns):
            if reason := self.meter.stop_reason():
                result.stopped = reason
                break
            slots = self._slots(problem, turn, archive)
            if turn and all(slot.parent is None for slot in slots):
                result.errors.append(f"turn {turn}: no stored candidate of {problem.name} to refine")
                break
            drawn, errors, result.stopped = self._turn(problem, turn, slots)
            result.errors += errors
            result.candidates += drawn
            best = self._credit(drawn, best)
            result.reached = self._at_speed_of_light(drawn)
            if archive is not None:
                result.migrations += self._grow(archive, drawn, turn)
            if result.stopped or result.reached or not drawn:
                break
            if turn + 1 < self.config.turns:
                self._profile(problem, drawn, result)
        return result

    def _profile(self, problem: Problem, drawn: list[Candidate], result: RunResult) -> None:
        """One ncu run per round on CUDA (with config.profile): the round's best correct candidate, unless it was
        profiled before; its metrics go into the next refine prompts that show its verdict."""
        best = max((c for c in drawn if c.verdict is not None and c.verdict.ok and c.path is not None),
                   key=Candidate.rank, default=None)
        if not self.config.profile or self.settings.device != "cuda" or best is None:
            return
        sha = best.verdict.solution_sha256
        if sha not in self.profiles:
            source = self.database.get_solution(sha).source  # the code the verdict is of (a twin's, for a twin)
            job = CandidateJob(path=best.path, problem=problem, source=source.encode())
            median = best.verdict.candidate.median_ms if best.verdict.candidate else None
            self.profiles[sha] = profile(job, self.settings, median)
        got = self.profiles[sha]
        result.profiles[sha] = f"{len(got.kernels)} kernel(s) profiled" if got.kernels else got.said

    def _archive(self, problem: Problem) -> Archive | None:
        if self.config.archive is None:
            return None
        return Archive(self.database, self.config.archive, problem.name, device_name(self.settings.device),
                       self.settings.size, self.settings.precision)

    def _slots(self, problem: Problem, turn: int, archive: Archive | None) -> list[Slot]:
        """Who refines what this turn: nothing on turn 0 (shown kernels of similar problems, with retrieval); then
        the classic parent, or each island's pick (the classic parent while an island is empty)."""
        samples = range(self.config.samples)
        islands = {i: island_of(self.config.archive, i) if archive else None for i in samples}
        if turn == 0:
            shown = related(self.database, problem, device_name(self.settings.device), self.settings.size,
                            self.config.retrieval, precision=self.settings.precision) if self.config.retrieval else []
            return [Slot(sample=i, island=islands[i], related=shown) for i in samples]
        classic = select_parent(self.database, problem, self.settings)
        slots = []
        for i in samples:
            chosen = archive.choose(turn, i) if archive else None
            slot = Slot(sample=i, island=islands[i], parent=classic)
            slots.append(self._from_archive(problem, archive, chosen, slot) if chosen else slot)
        return slots

    def _from_archive(self, problem: Problem, archive: Archive, chosen: Pick, slot: Slot) -> Slot:
        """The slot's parent as the archive picked it, with its partner (crossover) or the inspirations and the
        contrastive pair to show."""
        def parent(sha256: str) -> Parent:
            found = self.database.find_evaluation(sha256, *archive.key[1:], precision=archive.precision)
            return parent_of(self.database, problem, found)

        slot.parent, slot.mode = parent(chosen.member.solution_sha256), chosen.mode
        if chosen.partner is not None:
            slot.partner = parent(chosen.partner.solution_sha256)
        else:
            slot.inspirations = [program_of(parent(m.solution_sha256)) for m in archive.inspirations({slot.parent.sha256})]
            slot.contrast = [program_of(parent(m.solution_sha256)) for m in archive.contrast({slot.parent.sha256}) or ()]
        return slot

    def _turn(self, problem: Problem, turn: int, slots: list[Slot]) -> tuple[list[Candidate], list[str], str | None]:
        """One draw per slot, concurrently, each answer judged the moment it arrives (judging.stream): it joins
        the turn's running batch, whose reference started with the turn, while the other calls stay in flight. A
        failed call costs that sample only; a refused one (budget) ends the run after this turn's answers are
        judged."""
        for slot, arm in zip(slots, self.bandit.assign(problem.name, turn, [slot.sample for slot in slots])):
            slot.arm = arm
        requests = [LLMRequest(problem=problem.name, messages=self._messages(problem, slot), sample=slot.sample,
                               turn=turn, temperature=self.bandit.arms[slot.arm].temperature,
                               max_tokens=self.config.max_tokens)
                    for slot in slots]
        drawn, errors, stopped = [], [], None
        with StreamJudge(self.database, [problem], self.settings, functools.partial(self._judged, drawn)) as judging, \
                ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(requests))) as pool:
            pending = {pool.submit(self._draw, problem, request, slot): slot for request, slot in zip(requests, slots)}
            while pending:
                for future in wait(pending, return_when=FIRST_COMPLETED).done:
                    slot = pending.pop(future)
                    try:
                        self._hand_over(problem, future.result(), drawn, judging)
                    except LLMError as exc:
                        errors.append((slot.sample, f"turn {turn} sample {slot.sample}: {exc}"))
                        self.bandit.tell(slot.arm, Usage(), 0.0, 0.0)  # an arm whose server fails earns nothing
                    except BudgetExhausted as exc:
                        stopped = stopped or str(exc)
        return sorted(drawn, key=lambda c: c.sample), [e for _, e in sorted(errors)], stopped

    def _messages(self, problem: Problem, slot: Slot) -> list[dict]:
        where = {"target": self._target(), "size": self.settings.size, "precision": self.settings.precision}
        shown_on = slot.parent.verdict.device_name if slot.parent else device_name(self.settings.device)
        if slot.partner:
            return crossover_messages(problem, program_of(slot.parent), program_of(slot.partner), device_name=shown_on,
                                      **where)
        history = [Turn(source=slot.parent.source, verdict=slot.parent.verdict,
                        profile=self.profiles.get(slot.parent.sha256))] if slot.parent else []
        return chat_messages(problem, history, inspirations=slot.inspirations, device_name=shown_on,
                             related=slot.related, contrast=tuple(slot.contrast) or None, **where)

    def _taken_back(self, request: LLMRequest) -> tuple[LLMResponse, int, str | None] | None:
        """This run's own answer to the slot from before it was resumed, with its generation id and the
        parent it was written for; None when the run has none."""
        mine = self.run_id is not None and self.database.run_generation(self.run_id, request.problem, request.turn,
                                                                       request.sample)
        if not mine:
            return None
        parent = mine.parent_generation_id and self.database.get_generation(mine.parent_generation_id)
        return cache.cached_response(mine), mine.id, parent.solution_sha256 if parent else None

    def _answer(self, request: LLMRequest, slot: Slot, provider: Provider,
                key: str) -> tuple[LLMResponse, int | None, str | None]:
        """(response, stored generation id or None when it is new, the parent it was written for): any stored
        answer to the identical request (unless config.fresh), its reuse recorded for the trace, else a paid call."""
        parent_sha = slot.parent.sha256 if slot.parent else None
        if not self.config.fresh and (hit := cache.lookup(self.database, key)):
            self.database.add_reuse(hit[1], run_id=self.run_id)
            return hit[0], hit[1], parent_sha
        self.meter.admit()
        try:
            response = provider.complete(request)
        except BaseException:
            self.meter.cancel()
            raise
        self.meter.settle(response.usage, response.cost_usd)
        return response, None, parent_sha

    def _target(self) -> str:
        """What the prompts ask for: Triton kernels when answers are judged as Triton (--backend triton), else
        load_inline kernels for the device."""
        language = self.settings.language
        return "triton" if language is not None and language.value == "triton" else self.settings.device

    def _draw(self, problem: Problem, request: LLMRequest, slot: Slot) -> Candidate:
        provider = self.bandit.arms[slot.arm].provider
        key = cache.request_hash(provider, request)
        taken_back = self._taken_back(request)
        response, generation_id, parent_sha = taken_back or self._answer(request, slot, provider, key)
        extraction = extract(response.text, response.finish_reason)
        if generation_id is None:
            generation_id = cache.store(self.database, key, provider, request, response, extraction.status.value,
                                        slot.parent_generation_ids, run_id=self.run_id,
                                        island=slot.island, prompt_kind=slot.kind)
            cached = False
        else:
            cached = True
        path = write_candidate(self.config.out_dir, problem.name, extraction.code) if extraction.code is not None else None
        candidate = Candidate(problem=problem.name, turn=request.turn, sample=request.sample, generation_id=generation_id,
                              cached=cached, model=provider.model, arm=slot.arm, usage=response.usage,
                              cost_usd=response.cost_usd, extraction=extraction, path=path, parent_sha256=parent_sha,
                              island=slot.island, taken_back=taken_back is not None)
        self.events("answered", candidate)
        return candidate

    def _hand_over(self, problem: Problem, c: Candidate, drawn: list[Candidate], judging: StreamJudge) -> None:
        """An answer with code goes to be judged (judging.stream: a verdict stored before stands for its code, and
        so does one of its normalized form); one without code is judged at once, with no verdict."""
        with self._drawn_lock:
            drawn.append(c)
        if c.path is None:
            self.events("judged", c)
        else:
            judging.submit(self._submission(problem, c))

    def _judged(self, drawn: list[Candidate], judged: Judged) -> None:
        """A verdict came (from the judge's thread): the answers of that code take it."""
        with self._drawn_lock:
            takers = [c for c in drawn if c.path == judged.job.path and c.verdict is None]
            for c in takers:
                c.verdict = judged.verdict
                if c.path.stem != judged.verdict.solution_sha256:
                    c.duplicate_of = judged.verdict.solution_sha256
        for c in takers:
            self.events("judged", c)

    def _submission(self, problem: Problem, c: Candidate) -> Submission:
        """The answer's code with its lineage (the call that wrote it, the parent it refines), and the verdict of an
        answer that cannot be run."""
        job = CandidateJob(path=c.path, problem=problem, source=c.extraction.code.encode())
        static = None if c.extraction.ok else Verdict.of(job, self.settings, VERDICT_STATUS[c.extraction.status],
                                                         evidence=Evidence(stage="parse", cause=c.extraction.cause))
        return Submission(job=job, origin="repair" if c.turn else "generated", model=c.model,
                          parent_sha256=c.parent_sha256, normalized_sha256=normalized_sha256(job.text),
                          generation_id=c.generation_id, verdict=static)

    def _grow(self, archive: Archive, drawn: list[Candidate], turn: int) -> list[tuple[int, int, str]]:
        """Correct candidates enter their island's grid; every migration_interval turns the best of each island
        moves on to the next."""
        for c in drawn:
            v = c.verdict
            if v is not None and v.status is Status.CORRECT and v.speedup:
                archive.place(c.island, c.extraction.code, v.solution_sha256, v.speedup)
        if (turn + 1) % archive.config.migration_interval:
            return []
        return archive.migrate()

    def _at_speed_of_light(self, drawn: list[Candidate]) -> str | None:
        """Why the problem is done: a correct answer of this turn at sol_stop of the speed of light or beyond."""
        for v in (c.verdict for c in drawn if c.verdict is not None and c.verdict.ok and c.verdict.candidate):
            sol = v.evidence.timing.speed_of_light if v.evidence.timing else None
            if self.config.sol_stop and sol and sol.fraction(v.candidate.median_ms) >= self.config.sol_stop:
                return (f"{v.solution_sha256[:12]} runs at {100 * sol.fraction(v.candidate.median_ms):.0f}% of the "
                        f"speed of light ({sol.ms:.4g} ms, {sol.bound}-bound)")
        return None

    def _known_best(self, problem: Problem) -> float:
        """The best correct speedup of the problem here known before this run began (a resumed run: before its first
        `generate`), which its answers must beat to earn: replayed answers are credited as they were the first time."""
        since = self.database.get_run(self.run_id).created_at if self.run_id is not None else datetime.now(UTC)
        here = (device_name(self.settings.device), self.settings.size, self.settings.precision)
        return max((r.speedup or 0.0 for r in self.database.evaluations(problem.name) if r.created_at < since
                    and r.status == Status.CORRECT.value and (r.device_name, r.size, r.precision) == here), default=0.0)

    def _credit(self, drawn: list[Candidate], best: float) -> float:
        """Tell the bandit what each answer earned and cost: a correct one its speedup over the best known for its
        problem (its parent's when higher), a near-duplicate nothing. The best known after them."""
        if not self.bandit.learning:
            return best
        for c in drawn:
            v = c.verdict
            new = v is not None and v.status is Status.CORRECT and c.duplicate_of is None
            row = new and c.parent_sha256 and self.database.find_evaluation(c.parent_sha256, v.device_name, v.size,
                                                                            precision=v.precision)
            parent = row.speedup if row and row.status == Status.CORRECT.value else None
            self.bandit.tell(c.arm, c.usage, c.cost_usd, improvement(v.speedup if new else None, max(best, parent or 0.0)))
            best = max(best, v.speedup or 0.0) if new else best
        return best
