"""Decisions from a child's typed messages, made in the parent: which timed calls are checked, the pacing of
interleaved timing, the wall-clock and speed-of-light checks, and the rules that turn a run into an outcome."""
