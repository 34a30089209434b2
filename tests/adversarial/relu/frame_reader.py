"""Reads the timing loop's stack frames to learn which timed calls will be checked, and does the work only in
those (and in every call outside timing). Against a harness that chooses the checked calls in the candidate's own
process (a secret fraction in the hook's state, the round's last rep), every call it skips goes unseen. Here the
parent decides after each call: nothing in these frames says which."""
import sys

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


def _frames():
    frame = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _will_be_checked() -> bool | None:
    """None outside the timed loop; else whether this rep is one the harness snapshots, as far as frames say."""
    found = {f.f_code.co_name: f.f_locals for f in _frames()}
    loop = found.get("_cpu_round") or found.get("_cuda_round")
    if loop is None:
        return None
    rep, last = loop["first"] + loop["k"], loop["k"] == loop["n"] - 1
    keeper = loop.get("on_rep")
    fraction = getattr(keeper, "fraction", None)
    if fraction is None:
        return last
    least, checked = loop["least"], 3
    return last or rep in {int((fraction + k / checked) % 1 * least) for k in range(checked)}


class ModelNew(nn.Module):
    def forward(self, x):
        checked = _will_be_checked()
        return ext.relu(x) if checked is None or checked else torch.empty_like(x)
