#!/usr/bin/env bash
# The CuTe DSL's and TileLang's wheels for a GPU host that has neither (CPython 3.12, x86-64), in parts that fit one
# device call's carry each: .dslwhl/part-K/ (git-ignored), a wheel over the part size cut into pieces. Carry the
# parts one call at a time on one warm machine (each stays there), then run `bash scripts/device_check.sh languages`,
# which joins them and installs them once every wheel of MANIFEST is there. Usage: bash scripts/device_dsl_wheels.sh [PART_MIB, default 46]
set -euo pipefail
cd "$(dirname "$0")/.."
PART=$(( ${1:-46} * 1024 * 1024 ))
WHEELS="nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1
 nvidia-cutlass-dsl-libs-cu12==4.8.1 cuda-bindings==13.5.0 cuda-pathfinder==1.9.0 protobuf
 tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5 z3-solver==4.15.4.0 cloudpickle ml-dtypes psutil tqdm"
rm -rf .dslwhl && mkdir -p .dslwhl/all
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .dslwhl/all $WHEELS
cd .dslwhl/all
ls *.whl > ../MANIFEST  # what a complete set holds: device_check.sh installs nothing until every wheel is there
for whl in *.whl; do [ "$(stat -c %s "$whl")" -gt "$PART" ] && split -b "$PART" -d "$whl" "$whl.piece-" && rm "$whl"; done
k=0
for f in $(ls -S); do  # largest first, each into the first part with room
  size=$(stat -c %s "$f"); placed=
  for d in ../part-*; do
    [ -d "$d" ] && [ $(( $(du -sb "$d" | cut -f1) + size )) -le "$PART" ] && { mv "$f" "$d/"; placed=1; break; }
  done
  [ -n "$placed" ] || { k=$((k + 1)); mkdir "../part-$k"; mv "$f" "../part-$k/"; }
done
cd .. && rmdir all && for d in part-*; do cp MANIFEST "$d/"; done && rm MANIFEST && du -sh part-*
