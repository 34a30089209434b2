"""Budgets: hangs at import after starting processes of its own (shell loops, one in a session of its own, and a
real compiler blocked on an input that never comes), so its compile child would hold a compile slot for the
whole time limit. Every process it starts carries a marker the tests look for under /proc."""
import subprocess
import time

import torch.nn as nn

MARKER = "kforge_adversarial_import_hang"  # also a macro name, given to the compiler

for session in (False, False, True):
    subprocess.Popen(["sh", "-c", "while :; do sleep 1; done", MARKER], start_new_session=session)
# the compiler (g++, and the cc1plus it starts) exists but does no work: it waits on its stdin
subprocess.Popen(["g++", f"-D{MARKER}", "-x", "c++", "-fsyntax-only", "-"], stdin=subprocess.PIPE)
time.sleep(1 << 30)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.relu()
