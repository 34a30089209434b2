"""The trusted parent: a batch's scheduling, each problem's reference, placement on devices, the build cache,
introspection and profiling runs. It starts children through the sandbox and never runs candidate code."""
