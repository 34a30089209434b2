"""Dispatcher override (C++): its extension's TORCH_LIBRARY_IMPL(aten, CPU, m) replaces aten::clone and
aten::detach for CPU tensors as it loads. forward() returns an empty tensor at once; those kernels, which the
harness runs on outputs after the timer has stopped, write the real ReLU into it first."""
import torch.nn as nn

from tests.adversarial.prebuilt import load_shared

SOURCE = r"""
#include <torch/library.h>

static at::Tensor pending_x, pending_out;

static void fill(const at::Tensor& t) {
    if (!pending_out.defined() || t.data_ptr() != pending_out.data_ptr()) return;
    auto x = pending_x.contiguous();
    auto out = pending_out;
    pending_x.reset();
    pending_out.reset();
    const float* p = x.data_ptr<float>();
    float* q = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) q[i] = p[i] > 0.f ? p[i] : 0.f;
}

static at::Tensor filled_clone(const at::Tensor& t, std::optional<at::MemoryFormat> format) {
    fill(t);
    auto copy = at::empty_like(t, t.options(), format.value_or(at::MemoryFormat::Preserve));
    copy.copy_(t);
    return copy;
}

static at::Tensor filled_detach(const at::Tensor& t) {
    fill(t);
    return t.alias();
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
    m.impl("clone", TORCH_FN(filled_clone));
    m.impl("detach", TORCH_FN(filled_detach));
}

torch::Tensor defer(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "a float32 CPU tensor is expected");
    pending_x = x;
    pending_out = torch::empty_like(x);
    return pending_out;
}
"""

ext = load_shared("adversarial_aten_override", name="kforge_adversarial_aten_override", cpp_sources=SOURCE,
                  functions=["defer"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.defer(x)
