#!/usr/bin/env bash
# Issue 33's GPU figures, one call of the device machine per part, after ../shared/device's setup in the same call
# (bash .whl/device-setup.sh && bash bench/device_checks.sh updates: up to 120 s of setup and 470 s of steps, the
# call's 600 s; loop's steps 510 s, envpool's 400 s, seeds' 580 s). Run in the project root there:
#
#   bash bench/device_checks.sh updates   # pytest of the captured update, the DQN learner's updates/s per
#                                         # policy.compile mode, HalfCheetah SAC/TD3 env steps/s eager vs captured
#   bash bench/device_checks.sh seeds     # the seed table: HalfCheetah SAC/TD3 x 5 seeds, Pong PPO x 3 (IQM)
#   bash bench/device_checks.sh loop      # PPO's whole loop on 4,096 torch envs to 475 (env steps/s, seconds;
#                                         # eager and cudagraph),
#                                         # and the torch envs' and collector's rates against gymnasium's
#   bash bench/device_checks.sh envpool   # bare and collected Pong, ale-py against EnvPool, at 16 and 64 envs
#                                         # (EnvPool from .whl/envpool_slim: bench/envpool_slim.py says how)
#
# Logs and a summary go to $OUT (the device tool's folder that comes back), else ./device-logs. Each step has
# its own time limit, so one hang cannot eat the call; the summary's lines say what passed and each figure.
set -u
part=${1:-updates}
out=${OUT:-device-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
summary="$out/summary.txt"

step() {  # step NAME SECONDS COMMAND...: run it with a limit, log it, add its last lines to the summary
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  { echo "$name: rc $rc in $(( $(date +%s) - start )) s"; grep -E "summary|^== |IQM|stopped at|passed|failed|seed [0-9]|^ +[0-9]+ " \
      "$out/$name.log" | tail -n 8 | cut -c1-300; } | tee -a "$summary"
}

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; nproc; } | tee "$summary"
case "$part" in
  updates)
    step update-graph-tests 200 python3 -m pytest -q -m "gpu or gpu_training" -n 0 --timeout 150 \
      tests/gpu/test_update_graph_cuda.py tests/gpu/test_update_graph_training.py
    step learner-updates 100 python3 bench/learner_hot_path.py --modes none,cudagraph,cudagraph_update --updates 300
    step halfcheetah 170 python3 bench/offpolicy_gpu.py --seconds 25
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
    step seed-table 580 python3 bench/seed_table.py --plan device --root "$out/seed_table" --deadline-s 520
    ;;
  *)
    echo "device_checks: unknown part '$part' (updates | seeds | loop | envpool)"; exit 2 ;;
esac
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >>"$summary" 2>&1
echo "logs: $out"
