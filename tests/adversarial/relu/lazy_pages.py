"""Outputs that compute themselves when first read: inside the timed loop the kernel returns unreadable pages
at once, and a fault handler fills them with the ReLU when something reads them. A harness that reads outputs
only after the timer stopped (its snapshots, its handoff) pays for the work off the clock, and never for the
calls it does not read. The timed window here reads every output page before the timer stops."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

from tests.adversarial.reach import in_timing

SOURCE = r"""
#include <signal.h>
#include <sys/mman.h>

namespace {
struct Lazy { char* base; size_t bytes; const float* in; int64_t n; };
constexpr int kSlots = 64;
Lazy slots[kSlots];
struct sigaction previous;

void on_fault(int sig, siginfo_t* info, void* ctx) {
    char* at = static_cast<char*>(info->si_addr);
    for (Lazy& l : slots) {
        if (l.base != nullptr && at >= l.base && at < l.base + l.bytes) {
            mprotect(l.base, l.bytes, PROT_READ | PROT_WRITE);
            float* out = reinterpret_cast<float*>(l.base);
            for (int64_t i = 0; i < l.n; ++i) out[i] = l.in[i] > 0.f ? l.in[i] : 0.f;
            l.base = nullptr;
            return;
        }
    }
    sigaction(SIGSEGV, &previous, nullptr);  // not one of ours: fault as usual
}
}

torch::Tensor lazy_relu(torch::Tensor x) {
    static bool installed = false;
    if (!installed) {
        struct sigaction action = {};
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigaction(SIGSEGV, &action, &previous);
        installed = true;
    }
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat, "a contiguous float32 tensor is expected");
    const int64_t n = x.numel();
    const size_t bytes = ((n * sizeof(float) + 4095) / 4096) * 4096;
    void* memory = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(memory != MAP_FAILED, "mmap failed");
    int slot = 0;
    while (slot < kSlots && slots[slot].base != nullptr) ++slot;
    TORCH_CHECK(slot < kSlots, "too many outputs in flight");
    slots[slot] = {static_cast<char*>(memory), bytes, x.data_ptr<float>(), n};
    return torch::from_blob(memory, x.sizes(), [slot, bytes](void* p) {
        slots[slot].base = nullptr;
        munmap(p, bytes);
    }, torch::TensorOptions().dtype(torch::kFloat));
}

torch::Tensor relu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    float* q = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) q[i] = p[i] > 0.f ? p[i] : 0.f;
    return y;
}
"""

ext = load_inline("kforge_adversarial_lazy_pages", cpp_sources=SOURCE, functions=["lazy_relu", "relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.lazy_relu(x) if in_timing() else ext.relu(x)
