"""Evaluate-and-record: verdicts turned into stored rows (and, as it grows, reuse-or-evaluate for every caller)."""
