#!/usr/bin/env bash
# Long GPU work over remote commands that each have a time limit (the whole of KernelBench level 1, the audit):
# the work runs as a background job that outlives the command, and each later command collects it.
# Usage: bash scripts/device_job.sh start NAME "STEP" ["STEP"...]   e.g. start level1 "throughput 1" "speed"
#        bash scripts/device_job.sh collect NAME SECONDS           waits for the job (at most SECONDS), then
#                                                                  leaves what it wrote in $OUT/NAME.tgz
# A STEP is one device_check.sh command line; the job runs them in turn from a copy of the tree (/tmp/kf), each
# writing to /tmp/NAME, and logs to /tmp/NAME/log.txt. Environment (IDS, ONLY, PARALLEL, ...) passes through.
set -uo pipefail
cmd=${1:?start or collect}; name=${2:?a name}; shift 2
dir=/tmp/$name
case "$cmd" in
  start)
    rm -rf /tmp/kf "$dir" && mkdir -p "$dir" /tmp/kf
    tar -C "$(dirname "$0")/.." --exclude=./.venv -cf - . | tar -C /tmp/kf -xf -
    steps=$(printf '%q ' "$@")
    setsid nohup bash -c "cd /tmp/kf; for step in $steps; do date; OUT=$dir bash scripts/device_check.sh \$step;
      echo \"\$step: rc=\$?\"; done; date; rm -f $dir/kforge.db*; touch $dir/DONE" > "$dir/log.txt" 2>&1 < /dev/null &
    echo "started $name: $*" ;;
  collect)
    end=$((SECONDS + ${1:-570}))
    while [ $SECONDS -lt "$end" ] && [ ! -f "$dir/DONE" ]; do sleep 5; done
    [ -f "$dir/DONE" ] && echo "$name: done" || echo "$name: still running"
    tail -5 "$dir/log.txt"
    tar czf "${OUT:-.}/$name.tgz" --exclude='*.db*' -C /tmp "$name" ;;
  *) echo "usage: device_job.sh start NAME STEP... | collect NAME SECONDS" >&2; exit 2 ;;
esac
