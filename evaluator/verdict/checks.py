"""Which timed calls of a candidate are compared (the parent's side): decided after each call, at random, by the
parent. The candidate's process holds no secret that says which: after a round of timed calls (each one's
outputs snapshotted as its timer stopped) its harness says so (a `rep` message), and the parent answers which of
them to hand over. One message a round, sent while no call runs: one after every call kept kforge's relay busy
beside the candidate's next call (an identical candidate timed 0.87-0.89x its reference with a core hogged). A choice made in the candidate's process ahead of the calls was read from the timing
loop's stack frames, and a patched list of the calls to hand over kept the skipped calls from ever being judged;
here every call the parent asked for must arrive, and every timed call handed over is judged (evaluator.verdict.rules).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pydantic import ValidationError

from evaluator.labels import TIMED
from evaluator.protocol import Check, Rep, misfits
from evaluator.timing_method import ROUND

# Timed calls compared, on average, among the reps sure to run (`least`); past them each rep's odds fall as
# CHECKED / (rep + 1), so a loop paced on to ten times `least` compares ~3.3x as many, not ten times as many, and
# skipping the work in any stretch of reps is still as likely to be seen as anywhere else of its length. The last
# rep is compared besides (the child's snapshot of the reps that may be the last). Each comparison is a handoff
# (~50 ms on an H100, the comparer's IPC open included): as many as the secret positions they replace.
CHECKED = 3


@dataclass
class Checks:
    """Answers a candidate child's `rep` messages (the runner's relay calls it) and keeps what it asked for."""

    max_reps: int
    asked: list[str] = field(default_factory=list)  # labels of the timed calls whose outputs must be judged
    forged: str = ""  # a rep message the harness would not send
    _coin: random.SystemRandom = field(default_factory=random.SystemRandom)

    def __call__(self, message: dict) -> Check:
        try:
            rep = Rep.model_validate(message)
        except ValidationError as exc:
            return self._refuse(f"a malformed rep message ({misfits(exc)})")
        if rep.which + rep.reps > self.max_reps or rep.reps > ROUND or rep.least > self.max_reps:
            return self._refuse(f"a rep message for {rep.reps} reps from rep {rep.which} of {rep.least}")
        checked = [i for i in range(rep.which, rep.which + rep.reps)
                   if self._coin.random() < CHECKED / max(rep.least, i + 1)]
        self.asked += [f"{TIMED}{i}" for i in checked]
        return Check(checked=checked)

    def _refuse(self, why: str) -> Check:
        self.forged = self.forged or why
        return Check(checked=[])
