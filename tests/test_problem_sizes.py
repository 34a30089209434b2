"""Sizes that tell the truth: a KernelBench file declares no small size, so one is derived from its own shape
constants (reference_problems/sizes.py) and the verdict names it; a file whose shapes cannot be scaled is refused
at small instead of running at full size under that name. The derived sizes are run for real, and one KernelBench
problem at its real size (6.4 GB inputs) is judged through the `kforge` CLI on CPU at its derived size."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from conftest import kforge_runner
from db import Database
from reference_problems import ProblemError, resolve_problem
from reference_problems.registry import load_problem_file
from reference_problems.sizes import INPUT_BUDGET

HEADER = "import torch\nimport torch.nn as nn\n\n"

# KernelBench's level1/19_ReLU.py as its checkout has it: 4096 x 393216 floats, 6.4 GB per tensor
RELU = HEADER + '''class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []
'''

# level1/100_HingeLoss.py: (batch, 32768) * (batch,) broadcasts only while batch_size == input_shape[0]
HINGE = HEADER + '''class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))

batch_size = 32768
input_shape = (32768,)
dim = 1

def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]

def get_init_inputs():
    return []
'''

# level2-style: chained and tuple assignments, a shape computed from another constant, small constants kept
CONV = HEADER + '''class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return self.norm(self.conv(x)) + self.bias

batch_size = 128
in_channels = 3
out_channels = 64
kernel_size = 3
num_groups = 8
depth, height = 32, 64
width = height
bias_shape = (out_channels, 1, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape, num_groups]
'''

# its sizes are written into get_inputs: nothing to scale
LITERAL = HEADER + '''class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(4096, 393216)]

def get_init_inputs():
    return []
'''


# level3/29_SwinMLP.py's shape: the model is built for the image size its default argument holds, and refuses another
DEFAULT_IMAGE = HEADER + '''class Model(nn.Module):
    def __init__(self, img_size=64):
        super().__init__()
        self.img_size = img_size

    def forward(self, x):
        assert x.shape[-1] == self.img_size, f"input {x.shape[-1]} does not match the model's {self.img_size}"
        return x.mean()

batch_size = 256
image_size = 64

def get_inputs():
    return [torch.rand(batch_size, 3, image_size, image_size)]

def get_init_inputs():
    return []
'''

# level3/19_MobileNetV1.py's shape: strided layers bring 64 to 8, a fixed window pools the 8 x 8 to one, a Linear
# reads one value per channel
FIXED_POOL = HEADER + '''class Model(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 8, 1), nn.AvgPool2d(8))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).view(x.size(0), -1))

batch_size = 512
height = 64
width = 64
num_classes = 1000

def get_inputs():
    return [torch.rand(batch_size, 3, height, width)]

def get_init_inputs():
    return [num_classes]
'''

KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench"  # a checkout beside the repo, where there is one


def kernelbench(root: Path, files: dict[str, str]) -> Path:
    """A KernelBench checkout with these level-1 files."""
    (root / "level1").mkdir(parents=True)
    for name, text in files.items():
        (root / "level1" / name).write_text(text)
    return root


def run_at(problem, size: str) -> list[torch.Tensor]:
    """The problem's Model on its own inputs, resized as a child resizes it (evaluator/child/loading.py)."""
    spec = importlib.util.spec_from_file_location(f"sized_{problem.name}", problem.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, value in problem.overrides(size).items():
        setattr(module, name, value)
    inputs = module.get_inputs()
    with torch.no_grad():
        module.Model(*module.get_init_inputs())(*inputs)
    return inputs


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> dict:
    root = kernelbench(tmp_path_factory.mktemp("kb"), {"19_ReLU.py": RELU, "100_HingeLoss.py": HINGE,
                                                       "3_Conv3d_GroupNorm.py": CONV, "4_Literal.py": LITERAL,
                                                       "29_DefaultImage.py": DEFAULT_IMAGE, "19_FixedPool.py": FIXED_POOL})
    return {p.stem: load_problem_file(p) for p in (root / "level1").glob("*.py")}


@pytest.mark.parametrize("name", ["19_ReLU", "100_HingeLoss", "3_Conv3d_GroupNorm", "29_DefaultImage", "19_FixedPool"])
def test_a_derived_small_size_runs_within_the_budget(problems, name):
    problem = problems[name]
    assert problem.small_derived and problem.overrides("full") == {}
    inputs = run_at(problem, "small")
    assert sum(t.numel() for t in inputs) <= INPUT_BUDGET
    assert problem.size_label("small").startswith("small (derived): ")


def test_derived_sizes_keep_equal_constants_equal_and_small_ones_as_they_are(problems):
    assert problems["19_ReLU"].overrides("small") == {"batch_size": 16, "dim": 768}
    assert problems["19_ReLU"].size_label("small") == "small (derived): batch_size=16, dim=768"
    hinge = problems["100_HingeLoss"].overrides("small")
    assert hinge["input_shape"] == [hinge["batch_size"]] and "dim" not in hinge
    conv = problems["3_Conv3d_GroupNorm"].overrides("small")
    assert conv["width"] == conv["height"] and conv["bias_shape"] == [conv["out_channels"], 1, 1, 1]
    assert conv["out_channels"] % 8 == 0 and not {"in_channels", "kernel_size", "num_groups"} & set(conv)


def test_an_input_size_the_code_is_built_for_keeps_its_value(problems):
    """Before: the image was halved like the batch, and the model refused it (a default image size) or pooled it to
    nothing (a fixed window): reference_error. Now the image keeps its size, the batch alone shrinks, and the
    size says so."""
    assert problems["29_DefaultImage"].overrides("small") == {"batch_size": 64, "image_size": 64}
    assert problems["19_FixedPool"].overrides("small") == {"batch_size": 64, "height": 64, "width": 64, "num_classes": 125}
    assert problems["19_FixedPool"].size_label("small") == (
        "small (derived): batch_size=64, height=64, width=64, num_classes=125")


@pytest.mark.slow
@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="no KernelBench checkout beside the repo")
@pytest.mark.parametrize("name", ["19_MobileNetV1", "29_SwinMLP", "30_SwinTransformerV2"])
def test_kernelbench_networks_built_for_one_image_run_at_their_derived_size(name):
    problem = load_problem_file(KERNELBENCH / "level3" / f"{name}.py")
    assert problem.small_derived
    run_at(problem, "small")


def test_a_problem_whose_shapes_cannot_be_scaled_is_refused_at_small(problems):
    literal = problems["4_Literal"]
    assert not literal.small_derived and literal.overrides("full") == {}
    with pytest.raises(ProblemError, match=r"problem '4_Literal' declares no small size and none can be derived"):
        literal.overrides("small")


def test_a_declared_small_size_is_kept_and_named_plainly():
    relu = resolve_problem("relu")
    assert not relu.small_derived and relu.overrides("small") == {"batch_size": 16, "dim": 16384}
    assert relu.size_label("small") == "small: batch_size=16, dim=16384" and relu.size_label("full") == "full"


CANDIDATE = '''import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        if tuple(x.shape) != (16, 768):  # the derived size, or this run is not what its verdict says
            raise RuntimeError(f"ran at {tuple(x.shape)}")
        return ext.relu(x)
'''


def test_kernelbench_relu_on_cpu_runs_at_its_derived_size_and_its_verdict_says_so(tmp_path, adversarial_build_root):
    """The newcomer's run: 19_ReLU imported at its real size, judged on CPU with --size auto. Its candidate runs
    on (16, 768) inputs, not 6.4 GB ones, and the stored verdict names that size; a problem with nothing to scale
    is refused with one line and exit 2."""
    kforge = kforge_runner(tmp_path, adversarial_build_root, KFORGE_PROBLEMS_DIR=str(tmp_path / "problems"))
    kforge("problems", "import", str(kernelbench(tmp_path / "KernelBench", {"19_ReLU.py": RELU, "4_Literal.py": LITERAL})))
    cand = tmp_path / "relu_kernel.py"
    cand.write_text(CANDIDATE)
    line = json.loads(kforge("submit", str(cand), "--problem", "19_ReLU", "--device", "cpu", "--json").stdout)
    assert (line["status"], line["size"]) == ("correct", "small"), line
    shown = kforge("show", line["solution_sha256"][:12]).stdout
    assert "size: small (derived): batch_size=16, dim=768" in shown
    other = tmp_path / "literal_kernel.py"
    other.write_text(CANDIDATE.replace("(16, 768)", "(4096, 393216)"))
    proc = kforge("submit", str(other), "--problem", "4_Literal", "--device", "cpu", expect=2)
    assert "kforge: error: problem '4_Literal' declares no small size" in proc.stderr and "--size full" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr  # refused before anything ran or was stored
    with Database(kforge.db_url) as database:
        assert [row.problem for row in database.solutions()] == ["19_ReLU"]
