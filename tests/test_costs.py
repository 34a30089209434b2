"""evaluator.parent.flops: a batch's FLOPs, counted once in one jailed introspect child, at the batch's size."""

from __future__ import annotations

import shutil
import threading

from evaluator.parent.batch import Batch
from evaluator.parent.flops import ProblemCosts
from reference_problems import resolve_problem


def test_flops_are_counted_at_the_batch_size_and_a_stopped_batch_never_waits(cpu_settings):
    """matmul at --size small (N = 256) is 2 N^3 FLOPs, not its full size's; an element-wise problem has none; its
    bytes are known without waiting once measured.
    A batch stopped before its answers came gets None at once, not a wait for a child that is gone."""
    matmul, relu = resolve_problem("matmul"), resolve_problem("relu")
    batch = Batch(cpu_settings)
    try:
        costs = ProblemCosts(batch, [matmul, relu, matmul])
        assert costs.flops(matmul) == 2 * 256**3 != matmul.meta.flops
        assert costs.flops(relu) is None
        costs.wait()
        assert costs.bytes_moved(matmul) == 3 * 256 * 256 * 4  # A, B and A @ B in fp32, for the comparers' memory
        stopped = Batch(cpu_settings)
        stopped.stop.set()
        done = threading.Event()
        threading.Thread(target=lambda: (ProblemCosts(stopped, [matmul]).flops(matmul), done.set()), daemon=True).start()
        assert done.wait(30)
        shutil.rmtree(stopped.root)
    finally:
        shutil.rmtree(batch.root)
