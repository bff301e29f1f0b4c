#!/usr/bin/env bash
# One GPU-machine call that measures what docs/performance.md reports and makes the nsys fixtures.
# Run there as:  source .gpu/setup.sh; bash benchmarks/gpu_session.sh   (results under $OUT)
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
log "$(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) torch $(python3 -c 'import torch; print(torch.__version__)')"
stage=${1:-all}
if [[ $stage == all || $stage == tests ]]; then
  log "gpu tests"; python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -25 | tee -a "$OUT/log.txt"
fi
if [[ $stage == all || $stage == kernels ]]; then
  log "launchprobe classify --shape llama-3-8b --batch 1,64 --kernels"
  launchprobe classify --shape llama-3-8b --batch 1,64 --kernels -q --output "$OUT/kernels_8b.json" --format plain 2>&1 | tee -a "$OUT/log.txt" | tail -70
fi
if [[ $stage == all || $stage == nsys ]]; then
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
ls -la "$OUT" | tee -a "$OUT/log.txt"
