"""The reference's own work (so honestly 1.0x), plus native threads on every core that sweep 64 MB buffers
(CPU time, caches and memory bandwidth) whenever forward() has not run for 1 ms: while this process waits between its timed rounds, which is when the reference is timed
beside them, they would slow only the reference and inflate the ratio, had kforge not stopped the candidate's
processes while the reference runs."""
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
#include <atomic>
#include <cstring>
#include <vector>
#include <chrono>
#include <thread>
using namespace std::chrono;
static std::atomic<int64_t> last_call{0};
static int64_t now_us() { return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count(); }
torch::Tensor same(torch::Tensor x, torch::Tensor bias, double scale) {
    auto y = x * scale;
    y = y + bias;
    auto out = y * torch::clamp(y + 3.0, 0.0, 6.0) / 6.0;
    last_call = now_us();
    return out;
}
void spin(int64_t threads) {
    for (int64_t i = 0; i < threads; ++i) {
        std::thread([] {
            std::vector<char> buffer(64 << 20);  // larger than the caches: every pass evicts the reference's data
            volatile uint64_t n = 0;
            for (;;) {
                if (now_us() - last_call > 1000) std::memset(buffer.data(), int(n++), buffer.size());
                else std::this_thread::sleep_for(microseconds(200));
            }
        }).detach();
    }
}
"""
_ext = load_inline("kforge_adversarial_spin_while_paired", cpp_sources=_SRC, functions=["same", "spin"])
_ext.spin(2 * (os.cpu_count() or 1))


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return _ext.same(x, self.bias, self.scale)
