#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with a CUDA device (see README "The GPU check").
# Usage: bash scripts/device_check.sh [evaluate|repeat N|stages|probe|ncu [FILES]|timeline [FILES]|gpu-tests|adversarial|memory|speed|
#        speed-exec|throughput [LEVEL]|neighbours [REPS]|fingerprint [GB]|audit [LEVELS]|doctor|multigpu [N]|pairing|crowd|agent|answers [N G]|loads|languages|dsl|all]
# (logs and the db go to $OUT or ./device-out)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
if [ -d .whl ]; then  # a machine without pydantic/sqlalchemy: the wheels scripts/device_wheels.sh fetched, carried;
  # installed once per set of wheels, under a lock: two checks started at once would otherwise replace files the other imports
  (flock 9; stamp=$(ls .whl | md5sum); [ "$(cat /tmp/site/.wheels 2>/dev/null)" = "$stamp" ] ||
    { python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && echo "$stamp" > /tmp/site/.wheels; }
  ) 9> /tmp/site.lock || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
if [ -d .dslwhl ]; then  # the CuTe DSL's and TileLang's wheels, carried in parts (scripts/device_dsl_wheels.sh)
  mkdir -p /tmp/dslwhl && for d in .dslwhl/part-*; do cp "$d"/* /tmp/dslwhl/; done && (cd /tmp/dslwhl && for w in $(ls *.piece-00 2>/dev/null); do
    cat "${w%.piece-00}".piece-* > "${w%.piece-00}" && rm "${w%.piece-00}".piece-*; done)
  missing=$(cd /tmp/dslwhl && for w in $(cat MANIFEST); do python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1])' "$w" \
    2>/dev/null || echo "$w"; done)
  if [ -n "$missing" ]; then  # a part not carried yet: install nothing rather than half a DSL
    echo "DSL wheels not installed: $(echo $missing | wc -w) of $(wc -l < /tmp/dslwhl/MANIFEST) missing or cut" \
      "(carry the other .dslwhl parts): $(echo $missing)"
  else
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/dslsite /tmp/dslwhl/*.whl || exit 1
    # what the CuTe DSL's .pth would add, which a --target folder on PYTHONPATH does not run
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/dslsite:/tmp/dslsite/nvidia_cutlass_dsl/dsl_packages:$PWD
  fi
fi
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
[ -d /dev/shm ] && export TMPDIR=/dev/shm  # multi-GB reference outputs: keep the scratch files in RAM
export KFORGE_DB=${KFORGE_DB:-sqlite:///$OUT/kforge.db} KFORGE_BUILD_ROOT=${KFORGE_BUILD_ROOT:-/tmp/kforge-builds}
kf() { python3 -m kforge "$@"; }
peak() { python3 -c 'import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]).returncode; print(f"max RSS of any process in the tree: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/2**20:.2f} GiB", file=sys.stderr); sys.exit(r)' "$@"; }
REPAIRS=$(ls solutions/*/repair_*.py)

evaluate() {  # every seed and repair at full size, eager and torch.compile baselines
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
  peak python3 -m kforge evaluate solutions/ --device cuda --size full --compile-baseline --json | tee "$OUT/evaluate.jsonl"
  kf evaluate tests/gpu/candidates --device cuda --size small --json | tee "$OUT/leaks.jsonl"
}
staged() {  # a solutions-style tree holding only the given files (kforge evaluate takes directories)
  local dir=/tmp/kforge-staged; rm -rf $dir
  for f in "$@"; do mkdir -p $dir/$(basename $(dirname $f)); cp $f ${f%.py}.json $dir/$(basename $(dirname $f))/ 2>/dev/null; done
  echo $dir
}
repeat() {  # N more evaluations of the given files (default: the repairs), one batch each: parallel compiles
  local n=${1:-2}; shift; local dir; dir=$(staged ${@:-$REPAIRS})
  for i in $(seq "$n"); do kf evaluate $dir --device cuda --size full --jobs 14 --rerun --json; done | tee -a "$OUT/repeat.jsonl"
}
loads() {  # what a child's start costs (jailed children, forked and exec'd, alone and 8 at once), a comparer handoff, CUDA's start
  python3 benchmarks/jail_cost.py 4 --together 8 | tee "$OUT/loads.json"
  python3 benchmarks/ipc_cost.py 4 64 1024 | tee "$OUT/ipc_cost.jsonl"
  python3 benchmarks/cuda_start_cost.py 5 | tee "$OUT/cuda_start.json"
}
stages() {  # where a .cu's compile goes, stage by stage, full torch headers vs lean, with the SASS of both compared
  python3 benchmarks/compile_stages.py benchmarks/compile_set/*.cu solutions/*/seed_*.py $REPAIRS --parallel ${PARALLEL:-8} \
    --json "$OUT/stages.json" | tee "$OUT/stages.md"
}
probe() {  # the timer itself: hot vs flushed, first call vs steady state, run-to-run spread
  python3 benchmarks/gpu_timing_check.py | tee "$OUT/timing_check.json"
}
ncu() {  # Nsight Compute agreement; one more kforge evaluation first (it also leaves the builds ncu reuses)
  repeat 1 "${@:-$REPAIRS}"
  python3 benchmarks/ncu_compare.py "$KFORGE_DB" ${@:-$REPAIRS} | tee -a "$OUT/ncu.jsonl"
}
gpu_tests() {  # every test that needs a GPU: tests/gpu and the GPU reward-hacking classes
  python3 -m pytest ${GPU_TESTS:-tests/gpu tests/test_reward_hacking.py tests/test_lean_headers.py} -m gpu -v --durations=0 -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log"
}
adversarial() {  # each adversarial candidate on the GPU, with the status kforge gives it: the kernels they share built
  # first, and readable by their children, as the tests do (tests/conftest.py); the CUDA forms' folder names no problem
  export KFORGE_CHILD_READ=$PWD/tests/adversarial:$PWD/tests/candidates/triton/relu/honest.py
  for m in tiny_ext native_spy gpu_tiny_ext; do
    python3 -c 'import sys; from pathlib import Path; from tests.adversarial.prebuilt import prebuild; prebuild(Path(sys.argv[1]), sys.argv[2])' \
      "$KFORGE_BUILD_ROOT" "tests.adversarial.$m" || return 1
  done
  kf evaluate tests/adversarial --device cuda --size small --jobs 14 --json | tee "$OUT/adversarial.jsonl"
  kf evaluate tests/adversarial/cuda --problem tests/problems/relu_scale_add.py --device cuda --size full --json |
    tee "$OUT/adversarial_cuda.jsonl"
}
fingerprint() { python3 benchmarks/fingerprint_cost.py "$@" | tee "$OUT/fingerprint.jsonl"; }  # the input checksum at 0.25-6.4 GB
memory() { python3 benchmarks/giant_memory.py solutions/avg_pool_2d/*.py | tee "$OUT/memory.json"; }
speed() {  # the seeds and their repairs: kforge cold, warm, and the naive serial way (--modes picks)
  python3 benchmarks/eval_speed.py $(staged solutions/*/seed_*.py $REPAIRS) --device cuda --size full --jobs 14 "$@" \
    2> >(tee -a "$OUT/eval_speed${TAG:-}.progress" >&2) | tee "$OUT/eval_speed${TAG:-}.json"
}
throughput() {  # KernelBench level N (default 1) in one batch, cold then warm; KB=.kb (a carried copy of ../shared/kernelbench);
  # BUILD_ROOT: a build cache kept for a later call (MODES=cold, then MODES=warm on the same machine); TRACE=1: where
  # each pass held the GPU and what its children did meanwhile (benchmarks/hold_trace.py)
  python3 benchmarks/kernelbench_throughput.py ${KB:-.kb} --level ${1:-1} ${IDS:+--ids $IDS} ${JOBS:+--jobs $JOBS} \
    --modes ${MODES:-cold,warm} ${BUILD_ROOT:+--build-root $BUILD_ROOT} ${TRACE:+--trace "$OUT/trace.json"} --out "$OUT/throughput.json" \
    2> >(tee -a "$OUT/throughput.progress" >&2)
}
neighbours() {  # whether one GPU's context churn or IPC slows a handoff, synced kernels and CUDA's start on another
  python3 benchmarks/gpu_neighbours.py ${1:-20} | tee "$OUT/neighbours.jsonl"
}
audit() {  # all 250 problems at their own sizes: trivial answers, too fast to time, does not fit
  python3 benchmarks/problem_audit.py ${KB:-.kb} --levels ${1:-1,2,3} --parallel ${PARALLEL:-2} ${ONLY:+--only $ONLY} --out "$OUT/audit.md"
}
doctor() { python3 -m kforge doctor | tee "$OUT/doctor.txt"; }
languages() {  # Triton beside CUDA on KernelBench level 1 in one batch, three problems again at fp16 and bf16 (each
  # precision its own board), then the CuTe DSL and TileLang candidates where those import; KB=.kb as for throughput
  local src=tests/candidates/kernelbench_triton run=/tmp/kforge-languages half=/tmp/kforge-languages-half rc=0 ids
  { kf problems import ${KB:-.kb} && kf problems import $src/examples; } > "$OUT/languages_import.txt" || return 1
  rm -rf $run $half && cp -r $src/run $run && mkdir $half
  ids=$(ls $run | sed -n 's/^level_1_problem_\([0-9]*\)_.*/\1/p' | sort -un | paste -sd,)
  python3 -c 'import sys; from pathlib import Path; sys.path.insert(0, "benchmarks"); import kernelbench_throughput as t
t.write_candidates(Path(sys.argv[1]), 1, t.problem_ids(sys.argv[2]), Path(sys.argv[3]), "cuda")' ${KB:-.kb} $ids $run || return 1
  peak python3 -m kforge evaluate $run --device cuda --size full --json | tee "$OUT/languages.jsonl" || rc=1
  echo "languages: fp32 batch done at ${SECONDS} s"
  cp $run/level_1_problem_{1,21,24}_sample_*_kernel.py $half/
  for p in fp16 bf16; do kf evaluate $half --device cuda --size full --precision $p --json | tee "$OUT/languages_$p.jsonl" || rc=1; done
  for p in fp32 fp16 bf16; do kf leaderboard --precision $p | tee "$OUT/leaderboard_$p.txt"; done
  echo "languages: fp16 and bf16 done at ${SECONDS} s"
  dsl || rc=1
  echo "languages: done at ${SECONDS} s"
  return $rc
}
dsl() {  # the CuTe DSL and TileLang candidates, and their GPU test, where those import (the .dslwhl parts installed)
  local rc=0
  for lang in cute:cutlass tilelang:tilelang; do
    local dir=tests/candidates/${lang%%:*} module=${lang#*:}
    if ! python3 -c "import $module" 2>/dev/null; then echo "dsl: 'import $module' fails here: $dir not judged"; rc=1
    else kf evaluate $dir --device cuda --size full --json | tee "$OUT/dsl_${lang%%:*}.jsonl" || rc=1; fi
  done
  GPU_TESTS=tests/gpu/test_gpu_evaluator.py::test_a_dsl_kernel_of_its_own_must_launch gpu_tests || rc=1
  return $rc
}
multigpu() {  # the seeds and their repairs on one GPU and on every GPU, N times each in turn (builds warmed first)
  python3 benchmarks/multi_gpu.py "$(staged solutions/*/seed_*.py $REPAIRS)" --size full --jobs 14 -n ${1:-3} | tee "$OUT/multi_gpu.json"
}
pairing() {  # the repairs timed paired and apart, alternating batches (builds cached by an earlier step)
  python3 benchmarks/gpu_pairing.py "$(staged $REPAIRS)" -n ${1:-2} --build-root "$KFORGE_BUILD_ROOT" | tee "$OUT/pairing.txt"
}
crowd() {  # 8 submitters at once vs each file alone (its db off $OUT: a WAL file would not come back)
  local r="solutions/avg_pool_1d/repair_000_header_call.py solutions/matmul_maxpool_sum_scale/repair_003_completed.py
    solutions/conv1d/repair_004_imports_decl_call.py solutions/conv1d/repair_002_cpp_sources.py"
  kf evaluate "$(staged $r)" --device cuda --size full --jobs 14 --json >/dev/null  # the builds, so no submit compiles
  python3 benchmarks/concurrent_submit.py sqlite:////tmp/kforge-crowd.db $r $r | tee "$OUT/concurrent.txt"
}
answers() {  # the agent's answer-to-verdict time for new CUDA kernels: N answers G seconds apart (scripted server)
  python3 benchmarks/agent_overlap.py -n ${1:-8} --gap ${2:-2} --device cuda --size full | tee "$OUT/answers.txt"
}
agent() {  # two turns of the agent against the scripted server: turn 2's refine prompt with Nsight Compute's metrics
  python3 benchmarks/agent_profile_demo.py "$OUT/refine_prompt_ncu.txt" "$@" 2>&1 | tee "$OUT/agent_demo.txt"
}
timeline() {  # kernels, gaps and slow host calls inside each timed call (after an evaluation left the builds)
  for f in "${@:-$REPAIRS}"; do python3 benchmarks/kernel_timeline.py "$f" "$(basename "$(dirname "$f")")"; done | tee -a "$OUT/timeline.jsonl"
}
cmd=${1:-all}; shift || true
case "$cmd" in
  evaluate) evaluate ;; repeat) repeat "$@" ;; stages) stages ;; probe) probe ;; ncu) ncu "$@" ;; gpu-tests) gpu_tests ;;
  adversarial) adversarial ;; memory) memory ;; speed) speed "$@" ;;
  timeline) timeline "$@" ;;
  speed-exec) KFORGE_FORK_SERVER=0 TAG=_exec speed "$@" ;;  # each child its own interpreter: the fork server's baseline
  throughput) throughput "$@" ;; neighbours) neighbours "$@" ;; audit) audit "$@" ;; doctor) doctor ;; multigpu) multigpu "$@" ;; pairing) pairing "$@" ;; crowd) crowd ;;
  agent) agent "$@" ;; answers) answers "$@" ;; loads) loads ;; fingerprint) fingerprint "$@" ;;
  languages) languages ;; dsl) dsl ;;
  all) evaluate; repeat 4; probe; ncu; gpu_tests; adversarial; memory; speed ;;
esac
rc=$?  # the step's status (a failed GPU test included), not the leaderboard's
kf leaderboard
exit $rc
