"""The candidate child's one kernel watch: the extension watch always (it also counts calls into the problem's
file), nested around the Triton watch for a Triton candidate, with their counts and reports merged, so the parent
gets one Calls per trial and one Kernels message whatever the language. A Triton candidate's autotuning is held to
its budget and costed here too (evaluator/child/triton_autotune.py)."""

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
        self.triton = self.autotuning = None
        self._candidate = candidate_file
        self._interpreted = language is Language.TRITON and device == "cpu"
        if self._interpreted:  # the candidate's kernels are decorated at its import (the library's: TRITON_ON_CPU)
            os.environ["TRITON_INTERPRET"] = "1"
        if language is Language.TRITON:  # triton is imported only for its candidates
            from evaluator.child.triton_autotune import Autotuning
            from evaluator.child.triton_watch import TritonWatch
            self.triton = TritonWatch(candidate_file)
            self.autotuning = Autotuning(self._cpu_bench())

    def _cpu_bench(self):
        """Autotuning's benchmarker where Triton's own needs a GPU driver: under the interpreter, kforge's."""
        if not self._interpreted:
            return None
        from evaluator.child import triton_cpu
        return triton_cpu.bench

    def install(self) -> None:
        self.extensions.install()
        if self.triton is not None:
            self.triton.install()
            self.autotuning.install()

    def held(self) -> dict[type, tuple[str, ...]]:
        """Class attributes the watch replaced, for the guard to hold."""
        return self.triton.held() | self.autotuning.held() if self.triton is not None else {}

    def call(self, fn):
        """fn() watched by both: Triton's launches counted inside the profile hook's watch."""
        if self.triton is None:
            return self.extensions.call(fn)
        (result, launched), calls = self.extensions.call(lambda: self.triton.call(fn))
        calls.kernel += launched.kernel
        calls.foreign = launched.foreign
        return result, calls

    def report(self) -> Kernels:
        """What the trials showed, merged; interpreted kernels compiled for a GPU target first (triton_cpu)."""
        found = self.extensions.report.model_copy(deep=True)
        if self.triton is None:
            return found
        found.modules += self.triton.report.modules
        found.foreign = list(self.triton.foreign)
        found.autotuned = {name: (configs, round(seconds, 3)) for name, (configs, seconds) in self.autotuning.costs.items()}
        if self._interpreted:
            from evaluator.child import triton_cpu
            found.not_compiled = triton_cpu.not_compiled(self._candidate, self.triton.launched)
        self.triton.launched.clear()
        return found
