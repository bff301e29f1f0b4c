#!/usr/bin/env bash
# Records every field workload (benchmarks/field/README in tests/fixtures/field/README.md) on the GPU machine.
# Run from the project root there, after `source .gpu/setup.sh`, with the scripts in FIELD (default .field):
#     bash .field/record_all.sh
# Each workload runs under `timeout`; a failure never stops the others; a global deadline (FIELD_BUDGET_S, default
# 370 s) leaves time to pack. Everything lands in W (default /tmp/fieldrec), each file gzipped, then one tarball
# $OUT/field.tar.gz (split into 15 MiB parts if larger), and the log in $OUT/record.log.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
FIELD="${FIELD:-.field}"
W="${W:-/tmp/fieldrec}"
OUT="${OUT:-/tmp/fieldout}"
BUDGET="${FIELD_BUDGET_S:-370}"
DEADLINE=$((SECONDS + BUDGET))
rm -rf "$W" && mkdir -p "$W/logs" "$OUT"
exec > >(tee "$OUT/record.log") 2>&1
TABLE="$W/summary.tsv"
printf 'step\trc\tseconds\n' > "$TABLE"
read -r -a EXTRA <<< "${FIELD_EXTRA:-}"  # CPU smoke test: FIELD_EXTRA="--device cpu --dry"
NSYS_BASE=(nsys profile -s none --cuda-graph-trace=node --force-overwrite=true)

want() {  # want GROUP: FIELD_ONLY (space-separated groups A B G E C D F Ccomp) selects; empty runs all
  [ -z "${FIELD_ONLY:-}" ] || [[ " $FIELD_ONLY " == *" $1 "* ]]
}

run_step() {  # run_step NAME LIMIT_S CMD...: output in logs/NAME.log, SUMMARY lines echoed
  local name="$1" limit="$2"; shift 2
  local left=$((DEADLINE - SECONDS - 10))
  if [ "$left" -lt 25 ]; then
    echo "== $name: SKIPPED (deadline)"; printf '%s\tskipped\t0\n' "$name" >> "$TABLE"; return 0
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local t0=$SECONDS rc=0
  echo "== $name (limit ${limit}s, $(date -u +%H:%M:%S))"
  timeout -k 5 "$limit" "$@" > "$W/logs/$name.log" 2>&1 || rc=$?
  grep -h '^SUMMARY' "$W/logs/$name.log"
  if [ "$rc" -ne 0 ]; then echo "-- $name failed rc=$rc; tail:"; tail -n 8 "$W/logs/$name.log"; fi
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$TABLE"
  return 0
}

nsys_step() {  # nsys_step NAME LIMIT_S "TRACE_ARGS" CMD...: record W/NAME.nsys-rep, export W/NAME.sqlite
  local name="$1" limit="$2" trace="$3"; shift 3
  # shellcheck disable=SC2086  # TRACE_ARGS is a list of nsys options on purpose
  run_step "$name" "$limit" "${NSYS_BASE[@]}" $trace -o "$W/$name" "$@"
  if [ -f "$W/$name.nsys-rep" ]; then
    run_step "${name}_export" 60 nsys export --type sqlite --force-overwrite=true --output "$W/$name.sqlite" "$W/$name.nsys-rep"
  fi
}

echo "== versions"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nsys --version
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -n 1
  python3 -c 'import jax; print("jax", jax.__version__)' 2>&1 | tail -n 1
  python3 -c 'import nvtx; print("nvtx", getattr(nvtx, "__version__", "?"))' 2>&1 | tail -n 1
  uname -r
} 2>&1 | tee "$W/versions.txt"

BASE="-t cuda,nvtx --cpuctxsw=none"
# A: pipelined graph loop
if want A; then
run_step A_clean 60 python3 "$FIELD/pipelined_graph_loop.py" --label clean "${EXTRA[@]}"
nsys_step A_graph_loop 90 "$BASE" python3 "$FIELD/pipelined_graph_loop.py" --label nsys "${EXTRA[@]}"
fi
if want B; then
# B: server bursts, three recordings: launchprobe's arguments, + context switches, + OS runtime calls
run_step B_clean 60 python3 "$FIELD/server_bursts.py" --label clean "${EXTRA[@]}"
nsys_step B_server 80 "$BASE" python3 "$FIELD/server_bursts.py" --label nsys "${EXTRA[@]}"
nsys_step B_server_ctxsw 80 "-t cuda,nvtx --cpuctxsw=process-tree" python3 "$FIELD/server_bursts.py" --label nsys_ctxsw "${EXTRA[@]}"
nsys_step B_server_osrt 80 "-t cuda,nvtx,osrt --cpuctxsw=none" python3 "$FIELD/server_bursts.py" --label nsys_osrt "${EXTRA[@]}"
fi
if want G; then
# G: a host callback inside the step, eager and as one CUDA graph (no CPU path: it needs the driver's host functions)
run_step G_clean 60 python3 "$FIELD/host_callback_step.py" --label clean
nsys_step G_host_callback 90 "$BASE" python3 "$FIELD/host_callback_step.py" --label nsys
fi
if want E; then
# E: launchprobe classify, clean and under launchprobe nsys
# shellcheck disable=SC2054  # the commas are classify's list syntax
E_ARGS=(--shape "${FIELD_E_SHAPE:-llama-3.2-1b}" --batch 1,8 --mode eager,full --steps 20 --warmup 3 --ceilings datasheet --capture-sizes 1,8 -q)
LP="${FIELD_LP:-$FIELD/lp}"  # a launchprobe checkout to record (cwd of the run: python -m finds it first)
[ -d "$LP/launchprobe" ] || LP="."
echo "launchprobe for E: $LP ($(cat "$LP/COMMIT" 2>/dev/null || echo working tree))"
# shellcheck disable=SC2016  # expanded by the inner bash
run_step E_clean 90 bash -c 'cd "$0" && launchprobe classify "${@}"' "$LP" "${E_ARGS[@]}" -f plain -o "$W/E_classify_clean.json" --force
# shellcheck disable=SC2016  # expanded by the inner bash
run_step E_nsys 150 bash -c 'cd "$0" && launchprobe nsys --dir "$1" --range "decode_step.*" -f plain -- launchprobe classify "${@:2}"' \
  "$LP" "$W/E_nsys" "${E_ARGS[@]}" -f plain -o "$W/E_classify_nsys.json" --force
[ -f "$W/E_classify_clean.json" ] && [ -f "$W/E_classify_nsys.json" ] && \
  run_step E_summary 20 python3 "$FIELD/classify_summary.py" "$W/E_classify_clean.json" "$W/E_classify_nsys.json"
fi
if want C; then
# C: HF generate, eager: clean, nsys, Kineto
run_step C_clean 90 python3 "$FIELD/hf_generate.py" --label clean "${EXTRA[@]}"
nsys_step C_hf_eager 90 "$BASE" python3 "$FIELD/hf_generate.py" --repeats 1 --label nsys "${EXTRA[@]}"
run_step C_kineto 90 python3 "$FIELD/hf_generate.py" --repeats 1 --kineto "$W/C_hf_eager_kineto.json" --label kineto "${EXTRA[@]}"
fi
if want F; then
# F: Kineto training steps
run_step F_kineto_train 90 python3 "$FIELD/kineto_train.py" --output "$W/F_train_kineto.json" "${EXTRA[@]}"
fi
if want D; then
# D: JAX loop
run_step D_clean 60 python3 "$FIELD/jax_loop.py" --label clean "${EXTRA[@]}"
nsys_step D_jax 90 "$BASE" python3 "$FIELD/jax_loop.py" --label nsys "${EXTRA[@]}"
fi
if want Ccomp; then
# C compiled: static cache + torch.compile (inductor, mode default: reduce-overhead segfaults on transformers 5.17)
run_step C_compiled_clean 120 python3 "$FIELD/hf_generate.py" --compiled --compile-mode default --label clean "${EXTRA[@]}"
nsys_step C_hf_compiled 230 "$BASE" python3 "$FIELD/hf_generate.py" --compiled --compile-mode default --repeats 1 \
  --label nsys "${EXTRA[@]}"
fi

echo "== summary"
column -t "$TABLE" 2>/dev/null || cat "$TABLE"
grep -h '^SUMMARY' "$W"/logs/*.log | sort > "$W/summaries.txt"
cat "$W/summaries.txt"
echo "== sqlite tables"
for f in "$W"/*.sqlite "$W"/E_nsys/*.sqlite; do
  [ -f "$f" ] || continue
  python3 - "$f" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
names = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
big = [n for n in names if n.startswith(("CUPTI", "NVTX", "OSRT", "SCHED", "COMPOSITE", "THREAD", "PROCESS"))]
print(sys.argv[1].rsplit("/", 1)[-1], {n: con.execute(f"select count(*) from [{n}]").fetchone()[0] for n in big})
PY
done
echo "== pack"
find "$W" -name '*.nsys-rep' -delete
find "$W" -type f \( -name '*.sqlite' -o -name '*.json' -o -name '*.log' \) -exec gzip -9 {} +
du -ah "$W" | sort -h | tail -n 30
tar -C "$W" -czf "$OUT/field.tar.gz" .
if [ "$(stat -c %s "$OUT/field.tar.gz")" -gt 16000000 ]; then  # the tool returns files of at most 16 MiB
  split -b 15M -d "$OUT/field.tar.gz" "$OUT/field.tar.gz.part-" && rm "$OUT/field.tar.gz"
fi
ls -la "$OUT"
