"""Reads the timing loop's stack frames to learn which timed calls will be checked, and does the work only in
those (and in every call outside timing). Against a harness that chooses the checked calls in the candidate's own
process (a secret fraction in the hook's state, the round's last rep), every call it skips goes unseen. Here the
parent decides after each call: nothing in these frames says which."""
import torch
import torch.nn as nn

from tests.adversarial.reach import will_be_checked
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        checked = will_be_checked()
        return ext.relu(x) if checked is None or checked else torch.empty_like(x)
