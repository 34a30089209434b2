"""Reads the seeds its child was sent (the request is on the stack while the candidate is imported, and in the
garbage collector's view after) and precomputes every timed call's output with the harness's own functions,
then returns the next one without looking at its input: an in-process harness that filled the inputs from that
seed was paid 10x. Here the timed inputs come from seeds only the comparer holds."""
import gc
import sys

import torch.nn as nn

from evaluator.child import trials
from evaluator.protocol import CandidateRequest
from tests.adversarial.tiny_ext import ext


def _request():
    return next((o for o in gc.get_objects() if isinstance(o, CandidateRequest)), None)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.made = 0, {}

    def forward(self, x):
        req = _request()
        self.calls += 1
        if req is None or self.calls <= 3 + 2 * 2:  # its trials and leak windows: honest
            return ext.relu(x)
        problem = sys.modules["kforge_problem"]  # the harness loaded the problem under this name
        rep = self.calls
        if rep not in self.made:
            self.made[rep] = ext.relu(trials.make_inputs(problem, trials.rep_seed(req.timing_seed, rep), "cpu")[0])
        return self.made[rep]
