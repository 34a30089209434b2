"""kforge: turn LLMs into CUDA-kernel optimizers and judge their kernels honestly."""
