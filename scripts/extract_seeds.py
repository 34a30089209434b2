"""Extract the seed kernels from the LLM transcripts into solutions/<problem>/seed_<stem>.py.

Each seed is the transcript's FINAL ```python fenced block, copied byte for byte (no header, no
edits). A block whose closing fence is missing (the transcript was cut off) runs to end of file
and is kept cut: it is a realistic "truncated answer" case for the evaluator.

Usage: python scripts/extract_seeds.py [SEED_DIR]   (default: recordings/seeds)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
OPEN_FENCE = b"```python"
CLOSE_FENCE = b"```"

# seed file stem prefix -> (problem name, notes from reading the answer; not checked on a GPU)
SEEDS = {
    "000": ("avg_pool_1d", "CUDA; hard-codes 128 channels, input length 65536, kernel 8 and padding 4, ignores stride; "
                           "uses at::cuda::getCurrentCUDAStream without including ATen/cuda/CUDAContext.h; "
                           "extra_cflags=[''] passes an empty flag"),
    "001": ("avg_pool_2d", "CUDA; general avg_pool_2d kernel, but the flat index is a 32-bit int and the full size "
                           "has 16*64*2048*2048 = 2^32 input elements, so the index overflows at the full size"),
    "002": ("conv1d", "CUDA; direct conv1d with groups/stride/padding/dilation/bias; calls load_inline without "
                      "cpp_sources (a required argument), so the module should fail when imported"),
    "003": ("matmul_maxpool_sum_scale", "CUDA; the transcript is cut off inside the kernel source, so the block has "
                                        "no closing fence and the file is not valid Python (unterminated string)"),
    "004": ("conv1d", "CUDA im2col + torch.mm; cpp_sources='' leaves im2col_cuda undeclared for the generated "
                      "bindings; uses math and F without importing them and calls the extension module itself"),
}


def final_python_block(text: bytes) -> bytes:
    """Body of the last ```python fence: the lines after it up to the next ``` line, or to end of file."""
    lines = text.splitlines(keepends=True)
    opens = [i for i, line in enumerate(lines) if line.rstrip(b"\r\n").strip() == OPEN_FENCE]
    if not opens:
        raise ValueError("no ```python block")
    body = []
    for line in lines[opens[-1] + 1:]:
        if line.lstrip().startswith(CLOSE_FENCE):
            break
        body.append(line)
    return b"".join(body)


def main(seed_dir: Path) -> None:
    for path in sorted(seed_dir.glob("*.txt")):
        prefix = path.stem.split("_", 1)[0]
        if prefix not in SEEDS:
            print(f"skip {path.name}: no problem mapped")
            continue
        problem, notes = SEEDS[prefix]
        out_dir = SOLUTIONS / problem
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / f"seed_{path.stem}.py"
        out.write_bytes(final_python_block(path.read_bytes()))
        meta = {"origin": "seed", "seed_id": path.stem, "model": "unknown", "parent": None,
                "notes": f"final ```python block of {path.name}, verbatim. {notes}"}
        out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"{path.name} -> {out.relative_to(REPO)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "recordings" / "seeds")
