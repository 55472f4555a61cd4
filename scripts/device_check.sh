#!/usr/bin/env bash
# One device call: the project from a checkout on the GPU machine (no registry), and the reference GEMM's
# correctness and speed. Usage (from the repository root, on the GPU machine): bash scripts/device_check.sh
# Writes logs under $OUT (or ./device-out) and prints a short table last.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,uuid,pci.bus_id --format=csv,noheader > "$out/nvidia-smi-query.csv"
python3 -m pytest tests -q -p no:cacheprovider > "$out/tests.log" 2>&1; tests_rc=$?
python3 -m pytest tasks --ptx-model=reference -k gemm-n7168-k5120 --ptx-shapes=visible -rs --ptx-out="$out/run" \
  > "$out/main-job.log" 2>&1; main_rc=$?
timeout 330 python3 scripts/check_reference_gemm.py > "$out/reference-gemm.log" 2>&1; gemm_rc=$?
echo "== device"; cat "$out/nvidia-smi-query.csv"
echo "== tests (rc $tests_rc)"; tail -n 3 "$out/tests.log"
echo "== main job (rc $main_rc)"; grep -E "^ptxbench|^SKIPPED|passed|skipped|failed" "$out/main-job.log" | tail -n 8
echo "== reference GEMM (rc $gemm_rc)"; grep -v '^checked' "$out/reference-gemm.log" | tail -n 25
