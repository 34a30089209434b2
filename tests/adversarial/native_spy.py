"""A native thread for the forward-server attackers: it runs beside the server's Python, free of the GIL, as a
CUDA candidate's host code would. `watch` starts one that spins on an input's first and last elements and on
the exchange's words, and notes whether it ever saw new input values before the comparer's `go` for them."""

from tests.adversarial.prebuilt import load_shared

SOURCE = r"""
#include <atomic>
#include <cstdint>
#include <thread>

static std::atomic<bool> early{false};

void watch(int64_t data, int64_t count, int64_t go, int64_t armed) {
    std::thread([=] {
        const volatile float* p = reinterpret_cast<const float*>(data);
        const volatile uint64_t* g = reinterpret_cast<const uint64_t*>(go);
        const volatile uint64_t* a = reinterpret_cast<const uint64_t*>(armed);
        float first = p[0], last = p[count - 1];
        while (!early.load()) {
            float f = p[0], l = p[count - 1];
            if (f != first || l != last) {
                if (*g != *a) early.store(true);
                first = f;
                last = l;
            }
        }
    }).detach();
}

bool seen_early() { return early.load(); }
"""

spy = load_shared("adversarial_native_spy", name="kforge_adversarial_spy", cpp_sources=SOURCE,
                  functions=["watch", "seen_early"], extra_cflags=["-O2", "-pthread"])
