"""Exploit 9: leaves a daemon behind (double fork + setsid, out of the child's process group) that would keep
burning CPU while other candidates and the reference are timed. Its pid goes to a file the test reads."""
import os
import time

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

PID_FILE = "/tmp/kforge-adversarial-daemon.pids"

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(PID_FILE, "a") as fh, open("/proc/self/stat") as stat:  # pid and start time: pids get reused
            fh.write(f"{os.getpid()} {stat.read().rsplit(')', 1)[1].split()[19]}\n")
        deadline = time.time() + 120
        while time.time() < deadline:
            pass
        os._exit(0)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
