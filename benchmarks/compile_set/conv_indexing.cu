// A candidate that needs a name the lean headers leave out (torch::indexing, from ATen/TensorIndexing.h through
// torch/extension.h): its lean build fails to compile and it is built again with the full headers.
#include <torch/extension.h>

__global__ void scale_kernel(float* y, float s, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}

torch::Tensor crop_scale_cuda(torch::Tensor x, double s) {
    using namespace torch::indexing;
    auto y = x.index({Slice(), Slice(1, None)}).contiguous();
    int64_t n = y.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), (float)s, n);
    return y;
}
