#!/usr/bin/env bash
# GPU-machine calls that measure what docs/performance.md reports and make the nsys fixtures.
# Run there as:  source .gpu/setup.sh; bash benchmarks/gpu_session.sh STAGE   (results under $OUT)
#   nsys: the nsys fixtures of tests/fixtures;  sweep: kernel tuning sweep;  final-a, final-b (or final): the figures
#   kernels: the per-kernel pass (issue 12): gpu tests, then the whole matrix with its raw streams; 6 files under
#   $OUT (the device tool returns 8 a call), about 7 minutes
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
log "$(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) torch $(python3 -c 'import torch; print(torch.__version__)')"
stage=${1:?usage: gpu_session.sh nsys|sweep|final-a|final-b|final|kernels}
if [[ $stage == nsys ]]; then
  rm -rf /tmp/nt /tmp/n8 /tmp/np
  log "launchprobe nsys around classify tiny --nvtx ops"
  launchprobe nsys --dir /tmp/nt --name tiny -- python3 -m launchprobe classify --shape tiny --batch 1,4 --steps 5 --warmup 2 --nvtx ops -q --format json 2>&1 | tail -40 | tee -a "$OUT/log.txt"
  gzip -9 -c /tmp/nt/tiny.sqlite > "$OUT/classify_tiny_nvtx.sqlite.gz"
  log "launchprobe nsys around classify llama-3-8b batch 1, all modes"
  launchprobe nsys --dir /tmp/n8 --name l8b --range 'decode_step.*' -- python3 -m launchprobe classify --shape llama-3-8b --batch 1 --steps 20 --warmup 5 -q --format json --output /tmp/n8/classify.json 2>&1 | tail -40 | tee -a "$OUT/log.txt"
  gzip -9 -c /tmp/n8/l8b.sqlite > "$OUT/nsys_8b_b1.sqlite.gz"; cp /tmp/n8/classify.json "$OUT/nsys_8b_classify.json"
  log "launchprobe nsys around a plain PyTorch script"
  launchprobe nsys --dir /tmp/np --name plain --range 'step.*' -- python3 benchmarks/plain_torch_loop.py 2>&1 | tail -40 | tee -a "$OUT/log.txt"
  gzip -9 -c /tmp/np/plain.sqlite > "$OUT/plain_torch.sqlite.gz"
fi
if [[ $stage == sweep ]]; then
  log "gpu tests (kernels)"
  python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_gpu.py 2>&1 | tail -8 | tee -a "$OUT/log.txt"
  log "python3 benchmarks/bench_launch_cost.py"
  python3 benchmarks/bench_launch_cost.py 2>&1 | tee -a "$OUT/log.txt"
  log "python3 benchmarks/bench_kernels_sweep.py"
  python3 benchmarks/bench_kernels_sweep.py 2>&1 | tee -a "$OUT/log.txt"
fi
if [[ $stage == final || $stage == final-a ]]; then
  log "gpu tests"
  python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -8 | tee -a "$OUT/log.txt"
  log "python3 benchmarks/bench_overhead.py"
  python3 benchmarks/bench_overhead.py 2>&1 | tee -a "$OUT/log.txt"
  log "python3 benchmarks/bench_launch_cost.py"
  python3 benchmarks/bench_launch_cost.py 2>&1 | tee -a "$OUT/log.txt"
  log "launchprobe classify (defaults) with an empty ceilings cache; wall time includes measuring the ceilings"
  rm -rf /tmp/fresh-cache
  /usr/bin/time -f "wall %e s" env XDG_CACHE_HOME=/tmp/fresh-cache launchprobe classify --output "$OUT/default.json" --format plain 2>&1 | tee -a "$OUT/log.txt"
  log "launchprobe classify --shape llama-3-8b --batch 1,64 --kernels"
  launchprobe classify --shape llama-3-8b --batch 1,64 --kernels -q --output "$OUT/kernels_8b.json" --format plain 2>&1 | tee -a "$OUT/log.txt"
  log "launchprobe classify --shape llama-3-8b --batch 1 --mode eager,full --kernels --projections gemv"
  launchprobe classify --shape llama-3-8b --batch 1 --mode eager,full --kernels --projections gemv -q --output "$OUT/kernels_8b_gemv.json" --format plain 2>&1 | tee -a "$OUT/log.txt"
fi
if [[ $stage == final || $stage == final-b ]]; then
  log "python3 benchmarks/bench_speed_of_light.py --samples 5"
  python3 benchmarks/bench_speed_of_light.py --samples 5 2>&1 | tee -a "$OUT/log.txt"
  log "launchprobe classify --shape llama-3-70b --batch 1 --mode eager,full --projections gemv --steps 20 --kernels"
  launchprobe classify --shape llama-3-70b --batch 1 --mode eager,full --projections gemv --steps 20 --kernels -q --output "$OUT/l70b_gemv.json" --format plain 2>&1 | tee -a "$OUT/log.txt"
  log "launchprobe classify --shape llama-3-70b --batch 1 --mode eager,full --steps 20"
  launchprobe classify --shape llama-3-70b --batch 1 --mode eager,full --steps 20 -q --output "$OUT/l70b.json" --format plain 2>&1 | sed -n '/Decode step/,/^$/p' | tee -a "$OUT/log.txt"
  log "python3 benchmarks/bench_gemv.py --batches 1,8"
  python3 benchmarks/bench_gemv.py --batches 1,8 2>&1 | tee -a "$OUT/log.txt"
  log "launchprobe classify --shape llama-3.2-1b --batch 1,512 --context 128"
  launchprobe classify --shape llama-3.2-1b --batch 1,512 --context 128 -q --output "$OUT/l1b.json" --format plain 2>&1 | tee -a "$OUT/log.txt"
  log "kernels per token: launchprobe classify --shape S --batch 1 --mode eager --steps 5 --warmup 2 [--projections gemv], every preset"
  for proj in cublas gemv; do
    for shape in tiny llama-3.2-1b llama-3-8b llama-3-70b; do
      launchprobe classify --shape $shape --batch 1 --mode eager --steps 5 --warmup 2 --projections $proj -q --format json 2>/dev/null \
        | python3 -c "import json,sys; r=json.load(sys.stdin)['results'][0]; print('$shape $proj', r['kernels_per_step'], r['kernels_expected'], round(r['step_ms_median'], 3), r['verdict'])" | tee -a "$OUT/log.txt"
    done
  done
  log "launchprobe nsys --range 'kernel_pass.*' --range 'decode_step.*' -- launchprobe classify --shape llama-3-8b --batch 1 --mode eager,full --kernels"
  rm -rf /tmp/nx
  launchprobe nsys --dir /tmp/nx --name x8b --range 'kernel_pass.*' --range 'decode_step.*' --format json --output "$OUT/nsys_8b.json" -- \
    python3 -m launchprobe classify --shape llama-3-8b --batch 1 --mode eager,full --kernels --steps 20 -q --format json --output /tmp/nx/classify.json > /dev/null 2>> "$OUT/log.txt"
  cp /tmp/nx/classify.json "$OUT/nsys_8b_classify.json"
  python3 benchmarks/crosscheck_nsys.py /tmp/nx/classify.json "$OUT/nsys_8b.json" 2>&1 | tee -a "$OUT/log.txt"
fi
if [[ $stage == kernels ]]; then
  log "gpu tests"
  python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -4 | tee -a "$OUT/log.txt"
  log "python3 benchmarks/field/capture_sampled_raw.py \$OUT/m --out \$OUT/m/sampled.json --budget-s 330"
  mkdir -p "$OUT/m"
  python3 benchmarks/field/capture_sampled_raw.py "$OUT/m" --out "$OUT/m/sampled.json" --budget-s 330 2>&1 \
    | tee -a "$OUT/log.txt" | grep -A24 '^shape'
  log "python3 benchmarks/field/head_start.py \$OUT/m"
  python3 benchmarks/field/head_start.py "$OUT/m" 2>&1 | tee -a "$OUT/log.txt"
fi
ls -la "$OUT" | tee -a "$OUT/log.txt"
