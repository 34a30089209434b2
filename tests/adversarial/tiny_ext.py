"""The one compiled kernel the adversarial candidates share: a plain C++ ReLU.

A candidate file is built in a folder keyed on its own content, so each would recompile its own copy
(~45 s here). They import this module instead, which builds into one folder of kforge's build cache:
the same name and source hit torch's own cache, so the whole suite compiles it once.
"""

import os
from pathlib import Path

from torch.utils.cpp_extension import load_inline

SOURCE = r"""
torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "a float32 CPU tensor is expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    float* q = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) q[i] = p[i] > 0.f ? p[i] : 0.f;
    return y;
}
"""

# the jail lets a child write only its own build dir and the build root's shared pch/ folder: the test kernel lives there
BUILD_DIR = Path(os.environ["TORCH_EXTENSIONS_DIR"]).parent / "pch" / "adversarial_tiny_ext"
BUILD_DIR.mkdir(exist_ok=True)
ext = load_inline(name="kforge_adversarial_relu", cpp_sources=SOURCE, functions=["relu"], build_directory=str(BUILD_DIR))
