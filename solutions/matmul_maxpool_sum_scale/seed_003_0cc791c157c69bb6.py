import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Define the fused CUDA kernel for MaxPool, sum, and scaling
fused_pool_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void fused_pool_sum_scale_kernel(
    const float* __restrict__ input,
    float* __restrict__ output,
    int batch_size,
    int out_features,
    float scale_factor
) {
    int batch_idx = blockIdx.x;
    if (batch_idx >= batch_size) return;

    const float* x = input + batch_idx * out_features;
    float sum = 0.0f;

    int num_pairs = out_features / 2;
    int tid = threadIdx.x;
    int num_threads = blockDim.x;

    // Each thread processes a range of pairs
    for (int j = tid; j < num_pairs; j += num_threads) {
        int idx_a = 2 * j;
        int idx_b = 2 * j + 