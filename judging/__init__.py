"""Judge-and-store for every caller: a candidate's code and verdict turned into stored rows (record.py), the stored
verdict that stands for code judged before (reuse.py), and the one function that does both in order (judge.py)."""
