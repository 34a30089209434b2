#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with a CUDA device (see README "GPU evidence").
# Usage: bash scripts/device_check.sh [evaluate|repeat|probe|all]   (logs and the db go to $OUT or ./device-out)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
if [ -d .whl ]; then  # a machine without pydantic/sqlalchemy: install the carried wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
[ -d /dev/shm ] && export TMPDIR=/dev/shm  # multi-GB reference outputs: keep the scratch files in RAM
export KFORGE_DB=${KFORGE_DB:-sqlite:///$OUT/kforge.db} KFORGE_BUILD_ROOT=${KFORGE_BUILD_ROOT:-/tmp/kforge-builds}
kf() { python3 -m kforge "$@"; }
peak() { python3 -c 'import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]).returncode; print(f"max RSS of any process in the tree: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/2**20:.2f} GiB", file=sys.stderr); sys.exit(r)' "$@"; }
REPAIRS=$(ls solutions/*/repair_*.py)

evaluate() {  # every seed and repair at full size, eager and torch.compile baselines
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
  peak python3 -m kforge evaluate solutions/ --device cuda --size full --jobs 14 --compile-baseline --json | tee "$OUT/evaluate.jsonl"
  kf evaluate tests/gpu/candidates --device cuda --size small --json | tee "$OUT/leaks.jsonl"
}
repeat() {  # N more evaluations of the repairs, for the spread of the medians (one batch each: parallel compiles)
  local dir=/tmp/kforge-repairs; rm -rf $dir
  for f in $REPAIRS; do mkdir -p $dir/$(basename $(dirname $f)); cp $f ${f%.py}.json $dir/$(basename $(dirname $f))/; done
  for i in $(seq "${1:-2}"); do kf evaluate $dir --device cuda --size full --jobs 14 --rerun --json; done | tee -a "$OUT/repeat.jsonl"
}
probe() {  # the timer itself, Nsight Compute agreement, and the GPU test suite
  python3 benchmarks/gpu_timing_check.py | tee "$OUT/timing_check.json"
  python3 benchmarks/ncu_compare.py "$KFORGE_DB" $REPAIRS | tee "$OUT/ncu.jsonl"
  python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log"
}
case "${1:-all}" in
  evaluate) evaluate ;; repeat) repeat "${2:-2}" ;; probe) probe ;;
  all) evaluate; repeat 4; probe ;;
esac
kf leaderboard
