"""The candidate child's one kernel watch: the extension watch always (it also counts calls into the problem's
file), nested around the launch watch of a Triton, CuTe DSL or TileLang candidate, with their counts and reports
merged, so the parent gets one Calls per trial and one Kernels message whatever the language. A Triton candidate's
autotuning is held to its budget and costed here too (evaluator/child/triton_autotune.py)."""

from __future__ import annotations

import os
from pathlib import Path

from evaluator.child.kernel_watch import KernelWatch
from evaluator.languages import Language
from evaluator.protocol import Kernels


class Watch:
    """Install once, before the candidate is imported; `call(fn)` per watched call; `report()` once, after the
    trials (a kernel defined inside forward() is made in them)."""

    def __init__(self, problem_file: Path, candidate_file: Path, language: Language | None, device: str):
        self.extensions = KernelWatch(problem_file)
        self.launches = self.autotuning = None
        self._candidate = candidate_file
        self._interpreted = language is Language.TRITON and device == "cpu"
        if self._interpreted:  # the candidate's kernels are decorated at its import (the library's: TRITON_ON_CPU)
            os.environ["TRITON_INTERPRET"] = "1"
        # a language's library is imported only for its candidates
        if language is Language.TRITON:
            from evaluator.child.triton_autotune import Autotuning
            from evaluator.child.triton_watch import TritonWatch
            self.launches = TritonWatch(candidate_file)
            self.autotuning = Autotuning(self._cpu_bench())
        elif language is Language.CUTE:
            from evaluator.child.dsl_watch import CuteWatch
            self.launches = CuteWatch(candidate_file)
        elif language is Language.TILELANG:
            from evaluator.child.dsl_watch import TileLangWatch
            self.launches = TileLangWatch(candidate_file)

    def _cpu_bench(self):
        """Autotuning's benchmarker where Triton's own needs a GPU driver: under the interpreter, kforge's."""
        if not self._interpreted:
            return None
        from evaluator.child import triton_cpu
        return triton_cpu.bench

    def install(self) -> None:
        self.extensions.install()
        for watch in (self.launches, self.autotuning):
            if watch is not None:
                watch.install()

    def held(self) -> dict[type, tuple[str, ...]]:
        """Class attributes the watch replaced, for the guard to hold."""
        return {k: v for watch in (self.launches, self.autotuning) if watch is not None for k, v in watch.held().items()}

    def call(self, fn):
        """fn() watched by both: the language's launches counted inside the profile hook's watch."""
        if self.launches is None:
            return self.extensions.call(fn)
        (result, launched), calls = self.extensions.call(lambda: self.launches.call(fn))
        calls.kernel += launched.kernel
        calls.foreign = launched.foreign
        return result, calls

    def report(self) -> Kernels:
        """What the trials showed, merged; interpreted kernels compiled for a GPU target first (triton_cpu)."""
        found = self.extensions.report.model_copy(deep=True)
        if self.launches is None:
            return found
        found.modules += self.launches.report.modules
        found.foreign = list(self.launches.foreign)
        if self.autotuning is not None:
            found.autotuned = {name: (configs, round(seconds, 3)) for name, (configs, seconds) in self.autotuning.costs.items()}
        if self._interpreted:
            from evaluator.child import triton_cpu
            found.not_compiled = triton_cpu.not_compiled(self._candidate, self.launches.launched_first)
            self.launches.launched_first.clear()
        return found
