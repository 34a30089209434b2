// KernelBench 47_Sum_reduction_over_a_dimension, fp16 and fp32: warp shuffles, at::Half, an output of the
// reduced shape made with torch::empty and explicit options.
#include <torch/extension.h>
#include <cuda_fp16.h>

template <typename T> __device__ float to_float(T v) { return static_cast<float>(v); }

template <typename scalar_t>
__global__ void sum_dim1(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int outer, int dim, int inner) {
    int o = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= inner) return;
    float acc = 0.f;
    for (int d = 0; d < dim; ++d) acc += to_float(x[((int64_t)o * dim + d) * inner + i]);
    y[(int64_t)o * inner + i] = static_cast<scalar_t>(acc);
}

torch::Tensor sum_cuda(torch::Tensor x, int64_t dim) {
    auto sizes = x.sizes().vec();
    int outer = 1, inner = 1;
    for (int64_t k = 0; k < dim; ++k) outer *= sizes[k];
    for (size_t k = dim + 1; k < sizes.size(); ++k) inner *= sizes[k];
    int reduced = sizes[dim];
    sizes[dim] = 1;
    auto y = torch::empty(sizes, torch::TensorOptions().dtype(x.dtype()).device(x.device()));
    dim3 grid(outer, (inner + 255) / 256);
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "sum_cuda", [&] {
        sum_dim1<scalar_t><<<grid, 256>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), outer, reduced, inner);
    });
    return y;
}
