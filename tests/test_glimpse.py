"""What the timed window reads of a call's outputs (timing.glimpse) and the comparer's check of the snapshot
against it (comparer.late), on real tensors: any element of the lattice changed after the window is named,
and a glimpse that is missing or not the harness's lattice is refused."""

from __future__ import annotations

import pytest
import torch

from evaluator.child import comparer, timing


def _meta(t: torch.Tensor, seen: timing.Glimpse | None) -> dict:
    return {"device": t.device.type, **({"seen": seen.describe()} if seen else {})}


@pytest.mark.parametrize("shape", [(4096,), (16, 16384), (128, 4096, 1), (7, 3, 5), (1,), (), (2,) * 12])
def test_the_lattice_is_about_a_thousand_elements_spread_over_every_dimension(shape):
    t = torch.arange(max(1, torch.Size(shape).numel()), dtype=torch.float32).reshape(shape)
    g = timing.Glimpse.of(t)
    assert g.values.numel() == timing.lattice_of(t, g.start, g.step).numel()
    assert min(t.numel(), 1024) <= g.values.numel() <= 1100
    assert all(0 <= a < s for a, s in zip(g.start, g.step))
    index = tuple(slice(a, None, s) for a, s in zip(g.start, g.step))
    assert torch.equal(g.values, t[index] if shape else t)


def test_the_lattice_of_a_strided_output_is_its_own_elements_not_its_storage():
    t = torch.randn(50, 70, 3).transpose(0, 2)
    g = timing.Glimpse.of(t)
    assert torch.equal(g.values, t[tuple(slice(a, None, s) for a, s in zip(g.start, g.step))])


def test_the_starts_are_drawn_anew_for_every_call():
    t = torch.zeros(1 << 20)
    assert len({timing.Glimpse.of(t).start for _ in range(20)}) > 10


def test_an_output_unchanged_since_the_window_passes():
    t = torch.randn(64, 300)
    assert comparer.late([_meta(t, timing.Glimpse.of(t))], [t.clone()], "cpu") == ""


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64])
def test_an_element_written_after_the_window_is_named_with_both_values(dtype):
    t = torch.zeros(64, 300, dtype=dtype)
    g = timing.Glimpse.of(t)
    later = t.clone()
    where = (g.start[0] + 3 * g.step[0], g.start[1] + 5 * g.step[1])
    later[where] = 1
    found = comparer.late([_meta(t, g)], [later], "cpu")
    assert f"output 0 at {list(where)}" in found and "when the timer stopped" in found, found


def test_work_left_undone_in_a_small_share_of_the_output_is_still_seen():
    """A call that leaves 2 % of its output to be written after the timer is caught by nearly every glimpse:
    a share f is missed with (1 - f) ** 1024."""
    caught = 0
    for _ in range(50):
        done = torch.ones(1 << 16)
        window = done.clone()
        window[torch.randperm(window.numel())[: window.numel() // 50]] = 0
        caught += bool(comparer.late([_meta(window, timing.Glimpse.of(window))], [done], "cpu"))
    assert caught == 50


def test_outputs_on_another_device_or_empty_are_not_glimpsed():
    assert timing.glimpse([torch.ones(3), torch.ones(0), 5], "cuda") == [None, None, None]
    assert [g is None for g in timing.glimpse((torch.ones(3), torch.ones(0)), "cpu")] == [False, True]
    assert comparer.late([{"device": "cpu"}], [torch.ones(0)], "cpu") == ""


@pytest.mark.parametrize("forge", [lambda s: s.pop("seen"),
                                   lambda s: s["seen"].update(step=[64, 300]),
                                   lambda s: s["seen"].update(start=[999, 0]),
                                   lambda s: s["seen"].update(bytes="00")])
def test_a_glimpse_missing_or_not_the_harness_lattice_is_refused(forge):
    t = torch.randn(64, 300)
    meta = _meta(t, timing.Glimpse.of(t))
    forge(meta)
    with pytest.raises(ValueError):
        comparer.late([meta], [t], "cpu")
