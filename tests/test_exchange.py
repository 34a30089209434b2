"""The forward exchange's control page (evaluator.exchange): what a server writes there is read back field by
field, CUDA outputs with the place the comparer opens them by, and a forged description is refused."""

from __future__ import annotations

import mmap

import pytest

from evaluator import exchange


def _page() -> mmap.mmap:
    return mmap.mmap(-1, exchange.CTL_BYTES)


def test_outputs_read_back_as_written_cuda_ones_with_their_ipc_place():
    page, handle = _page(), bytes(range(64))
    exchange.write_outputs(page, [(4096, exchange.DTYPES.index("float32"), [2, 3], [3, 1]),
                                  (8192, exchange.DTYPES.index("bfloat16"), [5], [1], 512, handle),
                                  (0, -1, [], [])])
    cpu, cuda, other = exchange.read_outputs(page)
    assert tuple(cpu) == (4096, "float32", (2, 3), (3, 1)) and cpu.ipc is None and cpu.nbytes_span == 24
    assert tuple(cuda) == (8192, "bfloat16", (5,), (1,)) and cuda.ipc == {"handle": handle.hex(), "offset": 512}
    assert other[1] is None and other.ipc is None


def test_every_output_the_page_can_describe_fits_it():
    records = [(4096 * (i + 1), 0, [1] * exchange.MAX_DIMS, [1] * exchange.MAX_DIMS, 0, b"\x01" * 64)
               for i in range(exchange.MAX_OUTPUTS + 3)]
    page = _page()
    exchange.write_outputs(page, records)
    assert len(exchange.read_outputs(page)) == exchange.MAX_OUTPUTS


@pytest.mark.parametrize("record, said", [((4096, 99, [2], [1]), "dtype 99"), ((0, 0, [2], [1]), "at 0x0"),
                                          ((4096, 0, [-2], [1]), "shape (-2,)")])
def test_a_forged_description_is_refused(record, said):
    page = _page()
    exchange.write_outputs(page, [record])
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        exchange.read_outputs(page)
