"""The one compiled kernel the adversarial candidates share: a plain C++ ReLU.

They import this module instead of building their own copy: the tests build it once, before any candidate
runs (tests/adversarial/prebuilt.py; fixture `adversarial_build_root`), and children load it as it is.
"""

from tests.adversarial.prebuilt import load_shared

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

ext = load_shared("adversarial_tiny_ext", name="kforge_adversarial_relu", cpp_sources=SOURCE, functions=["relu"])
