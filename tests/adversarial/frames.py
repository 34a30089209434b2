"""What hostile candidates read from their own stack: whether kforge's timing loop is calling them."""
import sys


def in_timing() -> bool:
    """Whether a caller up the stack is the harness's timed loop (timing.bench)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "bench":
            return True
        frame = frame.f_back
    return False
