#!/usr/bin/env bash
# Issue 33's GPU figures, one call of the device machine per part, after ../shared/device's setup in the same call
# (bash .whl/device-setup.sh && bash bench/device_checks.sh updates: up to 120 s of setup, then the part's steps,
# each part's within the call's 600 s: updates 340 s, offpolicy 300 s, loop 510 s, envpool 400 s, seeds 480 s).
# The wheels beyond prepare.sh's defaults: `../shared/device/prepare.sh mujoco==3.3.7 glfw==2.11.0 PyOpenGL==3.1.10`
# (offpolicy, seeds: HalfCheetah), and for envpool dm-env and optree beside .whl/envpool_slim (bench/envpool_slim.py).
# Run in the project root there:
#
#   bash bench/device_checks.sh updates    # pytest of the captured update, the DQN learner's updates/s per
#                                          # policy.compile mode
#   bash bench/device_checks.sh offpolicy  # HalfCheetah SAC/TD3 env steps/s, eager against captured, and captured
#                                          # with 8 env steps then 8 updates (one graph) per iteration
#   bash bench/device_checks.sh seeds      # the seed table: HalfCheetah SAC/TD3 x 5 seeds, Pong PPO x 3 (IQM)
#   bash bench/device_checks.sh loop       # PPO's whole loop on 4,096 torch envs to 475 (env steps/s, seconds;
#                                          # eager and cudagraph),
#                                          # and the torch envs' and collector's rates against gymnasium's
#   bash bench/device_checks.sh envpool    # bare and collected Pong, ale-py against EnvPool, at 16 and 64 envs
#                                          # (EnvPool from .whl/envpool_slim: bench/envpool_slim.py says how)
#
# Logs and a summary go to $OUT (the device tool's folder that comes back, a few files: the seed table's runs stay
# outside it), else ./device-logs. Each step has its own time limit, so one hang cannot eat the call; the summary's
# lines say what passed and each figure (a step whose log has no figure line adds its last lines instead).
set -u
part=${1:-updates}
out=${OUT:-device-logs}
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the seeds part writes into it from the table's folder
export PYTHONUNBUFFERED=1
summary="$out/summary.txt"

#: the lines of a log that carry a result: pytest's totals and failures, each bench's figures and tables
FIGURES='summary|not reached|^== |IQM|stopped|passed|failed|FAILED|Error|seed [0-9]|^ +[0-9]+ |EnvPool|AtariVectorEnv|StepCollector|learner on|overlapped|env steps/s|^[a-z0-9]+_[a-z0-9_]+ +[0-9]'

step() {  # step NAME SECONDS COMMAND...: run it with a limit, log it, add its figure lines to the summary
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$name: rc $rc in $(( $(date +%s) - start )) s" | tee -a "$summary"
  { grep -E "$FIGURES" "$out/$name.log" || tail -n 6 "$out/$name.log"; } | tail -n 14 | cut -c1-300 | tee -a "$summary"
}

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; nproc; } | tee "$summary"
case "$part" in
  updates)
    step update-graph-tests 200 python3 -m pytest -q -m "gpu or gpu_training" -n 4 --dist load --timeout 150 \
      tests/gpu/test_update_graph_cuda.py tests/gpu/test_update_graph_training.py
    step learner-updates 140 python3 bench/learner_hot_path.py --modes none,cudagraph,cudagraph_update --updates 300
    ;;
  offpolicy)
    step halfcheetah 300 python3 bench/offpolicy_gpu.py --modes none,cudagraph_update,cudagraph_update@8 \
      --seconds 14 --cap-s 45
    ;;
  loop)
    step ppo-at-scale 360 python3 bench/device_env.py --device cuda --scale --compile none cudagraph
    step env-rates 150 python3 bench/device_env.py --device cuda --skip-ppo --envs 1024 16384
    ;;
  envpool)
    slim="$PWD/.whl/envpool_slim"
    [ -d "$slim/envpool" ] || { echo "device_checks: no $slim (build it with bench/envpool_slim.py)" | tee -a "$summary"; exit 2; }
    for n in 16 64; do
      step "pong-backends-$n" 200 env PYTHONPATH="$slim${PYTHONPATH:+:$PYTHONPATH}" \
        python3 bench/atari_pong.py --envs "$n" --steps 300 --repeats 3 --updates 5
    done
    ;;
  seeds)
    # the runs (checkpoints, logs) stay out of $OUT, which brings back a few files: the table and the runs' logs
    table=/tmp/seed_table
    step seed-table 480 python3 bench/seed_table.py --plan device --root "$table" --deadline-s 420
    cp "$table"/table.txt "$table"/table.json "$out"/ 2>/dev/null
    cat "$table"/table.txt >>"$summary" 2>/dev/null
    (cd "$table" && tar czf "$out/seed-table-logs.tgz" ./*.log ./*/progress.csv ./*/summary.json 2>/dev/null)
    ;;
  *)
    echo "device_checks: unknown part '$part' (updates | offpolicy | seeds | loop | envpool)"; exit 2 ;;
esac
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >>"$summary" 2>&1
echo "logs: $out"
