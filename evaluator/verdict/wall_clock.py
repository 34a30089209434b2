"""Whether a child's reported samples can be true, by the parent's wall-clock of its timed loop."""

from __future__ import annotations

_WALL_SLACK_S = 0.1  # message latency and scheduling noise between the child's loop and the parent's clock
_CPU_MIN_WALL_S = 0.5  # below this, a busy machine's scheduling noise could pass for missing time
_CPU_MIN_SHARE = 0.25  # on CPU, with no trusted figure for the fills, the samples must cover this share of the loop
# On CPU the loop's time beyond its samples and the reference's fills, as a share of the loop (plus _WALL_SLACK_S):
# honest candidates on this loaded 2-core VM left 0.008-0.089 s of 0.40-1.9 s loops unexplained (at most 61 % of
# this allowance); a wrapper reporting 1 call in 10 of relu's 3.2 ms kernel left 0.21 s of 0.42 s (146 % of it).
_CPU_UNEXPLAINED = 0.1


def implausible(samples: list[float], loop_wall_s: float, device: str, fill_s: float | None = None) -> str:
    """Why reported samples cannot be true, given the parent's wall-clock of the timed loop ('' if they can).

    The samples were taken inside the loop, so they cannot add up to more than it. On CPU the loop does
    little but time and fill fresh inputs, so they cannot add up to much less either (a timer patched and
    restored within a call, or work left running on a thread): `fill_s` is what the loop's fills and cache
    flushes took by a clock the candidate does not hold (the reference's blocks, timed by the parent beside
    the candidate's rounds), and what the loop took beyond the samples and those fills may be at most
    _CPU_UNEXPLAINED of it, plus _WALL_SLACK_S (which also covers short loops). Without that figure, the samples
    must cover _CPU_MIN_SHARE of a loop longer than _CPU_MIN_WALL_S. On CUDA
    the L2 flushes between reps make "less" normal.
    """
    total = sum(samples) / 1e3
    if total > loop_wall_s * 1.05 + _WALL_SLACK_S:
        return f"the timed calls report {total:.3f} s in total, but the whole timed loop took {loop_wall_s:.3f} s of wall-clock"
    if device != "cpu":
        return ""
    if fill_s is None:
        if loop_wall_s > _CPU_MIN_WALL_S and total < _CPU_MIN_SHARE * loop_wall_s - _WALL_SLACK_S:
            return f"the timed calls report {total:.3f} s in total, but the timed loop took {loop_wall_s:.3f} s of wall-clock"
        return ""
    unexplained = loop_wall_s - total - fill_s
    if unexplained > _CPU_UNEXPLAINED * loop_wall_s + _WALL_SLACK_S:
        return (f"the timed calls report {total:.3f} s in total and their fills and cache flushes take {fill_s:.3f} s "
                f"(as long a rep as the reference's beside them), but the timed loop took {loop_wall_s:.3f} s of "
                f"wall-clock: {unexplained:.3f} s went unreported")
    return ""
