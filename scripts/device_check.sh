#!/usr/bin/env bash
# One device call: the GPU tests, the main job on the core GEMM task with every stage (also once in the
# sandbox), the controls, and probes. From the repository root on the GPU machine (no registry):
#   bash scripts/device_check.sh          # all of that
#   bash scripts/device_check.sh table    # the reference kernels against the vendor libraries on every task and shape
#                                         # of gemm, attention_fwd, attention_bwd (scripts/bench_reference.py table)
#   bash scripts/device_check.sh bench FAMILY [KERNEL.cu ...] [-k WORDS] ...   # scripts/bench_reference.py FAMILY ...
#   bash scripts/device_check.sh harness FAMILY KERNEL.cu ... -k EXPR   # each kernel file through the harness as the
#                                         # family's candidate (--ptx-model=file:), on the tests EXPR selects
#   bash scripts/device_check.sh attention  # the reference attention kernels, d128 at S 4096, every stage
#   bash scripts/device_check.sh baselines  # FlashInfer as the baseline, cuDNN's backward under the task's check
#   bash scripts/device_check.sh triton     # the Triton references at the core shapes, every stage
#   bash scripts/device_check.sh suite [S]  # the whole GPU suite (-n 3, stopped after S seconds, 480 by default), then
#                                         # the reference at the core GEMM shape through the main job
#   bash scripts/device_check.sh decode     # the paged decode reference at its core shapes against FlashInfer
#                                           # (FlashInfer's wheels carried in .whl-flashinfer/)
#   bash scripts/device_check.sh paged      # both paged families' references at their first visible shape, every
#                                           # stage; `paged bench`: scripts/bench_reference.py on every task and shape
#   bash scripts/device_check.sh prefill [KERNEL.cu ...] [-k WORDS] [--no-baseline]
#                                           # scripts/bench_reference.py on the prefill family: variants side by side
#   bash scripts/device_check.sh ncu REGEX FAMILY [KERNEL.cu ...] -k WORDS
#                                           # ncu on the kernels whose names match REGEX in that bench run (ours and
#                                           # the vendor's): clock, tensor pipe, issue, L2, top stalls (scripts/ncu_table.py);
#                                           # the bench warms up with torch's bf16 matmul, also an "nvjet" kernel, so
#                                           # narrow REGEX, e.g. "gemm_bf16_tn|nvjet.*TNT"
# Needs the cupti-python wheel carried in .whl/ (see README). Logs go under $OUT (or ./device-out);
# a short table is printed last.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "${1:-}" = table ] || [ "${1:-}" = bench ]; then
  [ "$1" = bench ] && shift
  python3 scripts/bench_reference.py "$@" > "$out/bench.log" 2>&1; echo "bench rc=$?"
  sed -n '/^== \(failures\|all checks passed\)/,$p' "$out/bench.log"
  exit 0
fi
if [ "${1:-}" = harness ]; then
  family=$2; shift 2; kernels=()
  while [ $# -gt 0 ] && [ "$1" != -k ]; do kernels+=("$1"); shift; done
  expr=${2:?"harness FAMILY KERNEL.cu ... -k EXPR"}
  for i in "${!kernels[@]}"; do
    folder=/tmp/variants/$i; rm -rf "$folder"; mkdir -p "$folder"; cp "${kernels[$i]}" "$folder/$family.cu"
    python3 -m pytest tasks --ptx-model="file:$folder" -k "$family and ($expr)" --ptx-shapes=all -rA \
      -p no:cacheprovider --ptx-out="/tmp/harness-$i" > "$out/harness-$i.log" 2>&1; echo "${kernels[$i]} rc=$?"
    sed -n '/= ptxbench =/,/^$/p' "$out/harness-$i.log" | grep -E "^$family|geometric"
  done
  exit 0
fi
if [ "${1:-}" = baselines ]; then
  python3 scripts/controls.py --baselines > "$out/baselines.log" 2>&1; echo "baselines rc=$?"; tail -n 12 "$out/baselines.log"
  exit 0
fi
if [ "${1:-}" = triton ]; then
  python3 -m pytest tasks --ptx-model=reference --ptx-lang=triton --ptx-shapes=visible -rA -p no:cacheprovider \
    -k "h100 and (gemm-n7168-k5120-h100-triton-m8192 or (d128 and s4096))" --ptx-out=/tmp/triton \
    > "$out/triton-main.log" 2>&1; echo "triton main job rc=$?"
  tar czf "$out/triton.tgz" -C /tmp triton/results.jsonl 2>/dev/null
  sed -n '/= ptxbench =/,/^$/p' "$out/triton-main.log"; python3 scripts/controls.py --stages /tmp/triton
  exit 0
fi
if [ "${1:-}" = suite ]; then
  # stopped with SIGINT after ${2:-480} s, so that whatever ran is still reported (pass and fail by name)
  timeout -s INT -k 15 "${2:-480}" python3 -m pytest tests/test_gpu.py tests/test_sandbox.py -n 3 -v -rA --tb=short \
    -p no:cacheprovider --durations=6 --basetemp=/tmp/gpu-tests > "$out/suite.log" 2>&1; echo "GPU suite rc=$? (${SECONDS} s)"
  python3 -m pytest tasks --ptx-model=reference -k gemm-n7168-k5120-h100-m8192 --ptx-shapes=visible -rA \
    -p no:cacheprovider --durations=2 --ptx-out=/tmp/core > "$out/core.log" 2>&1; echo "core main job rc=$?"
  tar czf "$out/core.tgz" -C /tmp core/results.jsonl core/environment.json 2>/dev/null
  grep -E "^(FAILED|ERROR)|^core GEMM|^[0-9.]+s (call|setup)" "$out/suite.log"; tail -n 1 "$out/suite.log"
  echo "$(grep -c '^PASSED' "$out/suite.log") passed by name"
  grep -E "^[0-9.]+s (call|setup)" "$out/core.log"; sed -n '/= ptxbench =/,/^$/p' "$out/core.log"
  python3 scripts/controls.py --stages /tmp/core
  exit 0
fi
if [ "${1:-}" = decode ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl-flashinfer/*.whl
  export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer
  python3 -m pytest tests/test_references.py -q -p no:cacheprovider 2>&1 | tail -n 1
  timeout 420 python3 -m pytest tasks --ptx-model=reference -k "gqa_paged_decode and kv8 and b64-l4096" -rA \
    -p no:cacheprovider --ptx-shapes=visible --ptx-out=/tmp/decode > "$out/decode.log" 2>&1; echo "decode rc=$?"
  tar czf "$out/decode.tgz" -C /tmp decode/results.jsonl decode/logs 2>/dev/null
  sed -n '/= ptxbench =/,/^$/p' "$out/decode.log"; python3 scripts/controls.py --stages /tmp/decode
  grep -E "^E |Error" "$out/decode.log" | head -n 20
  [ "${2:-}" = opcodes ] && python3 scripts/flashinfer_decode_opcodes.py
  exit 0
fi
if [ "${1:-}" = paged ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl-flashinfer/*.whl
  export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer
  if [ "${2:-}" = bench ]; then
    for family in gqa_paged_decode gqa_paged_prefill; do
      python3 scripts/bench_reference.py "$family" > "$out/bench-$family.log" 2>&1; echo "$family rc=$?"
      sed -n '/^== \(failures\|all checks passed\)/,$p' "$out/bench-$family.log"
    done
    exit 0
  fi
  python3 -m pytest tests/test_references.py -q -p no:cacheprovider 2>&1 | tail -n 1
  python3 -m pytest tasks --ptx-model=reference -k "gqa_paged and kv8 and (b64-l4096 or b16-q1024)" -rA \
    -p no:cacheprovider --ptx-shapes=visible --ptx-out=/tmp/paged > "$out/paged.log" 2>&1; echo "paged rc=$?"
  tar czf "$out/paged.tgz" -C /tmp paged/results.jsonl paged/logs 2>/dev/null
  sed -n '/= ptxbench =/,/^$/p' "$out/paged.log"; python3 scripts/controls.py --stages /tmp/paged
  exit 0
fi
if [ "${1:-}" = prefill ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl-flashinfer/*.whl
  export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer
  shift
  python3 scripts/bench_reference.py gqa_paged_prefill "$@" > "$out/bench-prefill.log" 2>&1; echo "prefill rc=$?"
  sed -n '/^== \(failures\|all checks passed\)/,$p' "$out/bench-prefill.log"
  exit 0
fi
if [ "${1:-}" = ncu ]; then
  regex=$2; shift 2
  ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$regex" --launch-count 6 \
    --section SpeedOfLight --section WarpStateStats --metrics "$(python3 scripts/ncu_table.py --metrics)" \
    --csv --page raw python3 scripts/bench_reference.py "$@" --runs 3 > "$out/ncu.csv" 2> "$out/ncu.err"
  echo "ncu rc=$?"; python3 scripts/ncu_table.py "$out/ncu.csv" || tail -n 20 "$out/ncu.err"
  exit 0
fi
if [ "${1:-}" = attention ]; then
  python3 -m pytest tasks --ptx-model=reference -k "attention and d128 and h100 and s4096" --ptx-shapes=visible -rA \
    -p no:cacheprovider --ptx-out=/tmp/attn > "$out/attention.log" 2>&1; echo "attention rc=$?"
  tar czf "$out/attention.tgz" -C /tmp attn/results.jsonl attn/environment.json
  sed -n '/= ptxbench =/,/^$/p' "$out/attention.log"; python3 scripts/controls.py --stages /tmp/attn
  exit 0
fi
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,uuid,pci.bus_id --format=csv,noheader > "$out/nvidia-smi-query.csv"
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit --format=csv > "$out/nvidia-smi-clocks.csv"  # recorded as tests/data/nvidia-smi-clocks.csv
python3 -c "import torch; print(torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default._schema)" > "$out/probes.txt" 2>&1
start=$(date +%s)
python3 -m pytest tests/test_gpu.py -v -rA -p no:cacheprovider --basetemp=/tmp/gpu-tests > "$out/gpu-tests.log" 2>&1; gpu_rc=$?
mid=$(date +%s)
python3 -m pytest tasks --ptx-model=reference -k gemm-n7168-k5120 --ptx-shapes=visible -rA --ptx-out=/tmp/run \
  > "$out/main-job.log" 2>&1; main_rc=$?
end=$(date +%s)
python3 -m pytest tasks --ptx-model=reference -k gemm-n7168-k5120-h100-m972 --ptx-shapes=visible -p no:cacheprovider \
  --ptx-sandbox=namespaces --ptx-out=/tmp/sandboxed > "$out/sandboxed.log" 2>&1; sandbox_rc=$?
python3 scripts/controls.py /tmp/run > "$out/controls.log" 2>&1; controls_rc=$?
tar czf "$out/logs.tgz" -C /tmp run/logs run/results.jsonl run/environment.json gpu-tests 2>/dev/null
echo "== device"; cat "$out/nvidia-smi-query.csv" "$out/nvidia-smi-clocks.csv"
echo "== probes"; cat "$out/probes.txt"
echo "== GPU tests (rc $gpu_rc, $((mid - start)) s)"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" "$out/gpu-tests.log" | tail -n 14
echo "== main job (rc $main_rc, $((end - mid)) s)"; sed -n '/= ptxbench =/,$p' "$out/main-job.log" | head -n 12
echo "== sandboxed main job (rc $sandbox_rc)"; grep -E "passed|failed|skipped" "$out/sandboxed.log" | tail -n 2
echo "== controls (rc $controls_rc)"; tail -n 14 "$out/controls.log"
