"""How a candidate's extension is built, used by both processes: in kforge's, the build key's versions, the
precompiled headers predicted from a source and published to the build cache; in the compile and candidate
children, the same tools installed around load_inline (lean headers, the precompiled header, the nvcc driver).
Nothing here runs candidate code or decides a verdict."""

BUILD_TIMEOUT_S = 900.0  # a precompiled header's build: ~70 s of CPU; wall time is what a loaded machine makes of it
