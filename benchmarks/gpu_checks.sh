#!/usr/bin/env bash
# The checks that only a GPU can run, in one go of about ten minutes, each step time-boxed and
# logged to OUT/<step>.log (the last lines printed as it goes):
#
#   tests    the tests that take CUDA where it is present: stream slots, the device's greedy
#            search and features against the CPU's, the deterministic CUDA resume, and
#            `serve --device cuda --jobs 2` (each worker's own model on the GPU)
#   streams  bench_streaming on the GPU with slots (conformer_u2, chunk 16, left 4): the
#            largest stream count whose p95 step stays within the chunk is its capacity
#   noslots  the same at 256 streams with each stream holding its own state (the CPU's way)
#   train    bench_train on the GPU, when DATA names prepared data (with DATA/cmvn.json)
#   heads    bench_train of conformer_u2 per head (CTC, CR-CTC, hybrid transducer, hybrid +
#            CR-CTC) when DATA is set: step speed and the pruned loss's peak memory, in bf16
#
# Usage, from the project root on a CUDA machine (PYTHON: the Python with torch; DEVICE:
# cuda by default, cpu for a dry run):
#   bash benchmarks/gpu_checks.sh OUT [STREAMS...]     # STREAMS: default 1 64 256 1024 2048
# ONLY="tests heads streams" runs those steps alone; HEADS_LIMIT and STREAMS_LIMIT (seconds)
# shorten their time boxes.
set -uo pipefail
out=${1:?give a folder for the logs}
shift
streams=${*:-1 64 256 1024 2048}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
mkdir -p "$out"

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  case " ${ONLY:-$name} " in *" ${name%%-*} "*|*" $name "*) ;; *) return 0 ;; esac
  echo "== $name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "   exit $? ($(wc -l < "$out/$name.log") lines in $out/$name.log)"
  tail -n 20 "$out/$name.log"
}

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader | tee "$out/gpu.txt"
step tests 240 "$py" -m pytest -q -p no:cacheprovider tests/runtime/test_engines.py \
  tests/search/test_ctc_search.py tests/features/test_stream_fbank.py tests/train/test_train.py \
  tests/serve/test_server.py tests/runtime/test_streaming_transducer.py \
  -k "slots or batched_greedy or on_a_device or cuda_resume or on_a_gpu or cuda"
if [ -n "${DATA:-}" ]; then
  for head in ctc cr-ctc hybrid hybrid-cr-ctc; do
    case $head in
      ctc) sets=() ;;
      cr-ctc) sets=(--set model.cr_ctc_weight=0.2) ;;
      hybrid) sets=(--set model.transducer_weight=0.75) ;;
      hybrid-cr-ctc) sets=(--set model.transducer_weight=0.75 --set model.cr_ctc_weight=0.2) ;;
    esac
    step "heads-$head" "${HEADS_LIMIT:-90}" "$py" benchmarks/bench_train.py \
      --config conf/conformer_u2.yaml --data "$DATA" --device "$device" --no-compile \
      --steps 8 --warmup 4 --threads 4 --set features.num_mel_bins=40 --set tokenizer.vocab_size=2500 "${sets[@]}"
  done
  step train 300 "$py" benchmarks/bench_train.py --config conf/synthetic_small.yaml \
    --data "$DATA" --device "$device" --no-compile
fi
# shellcheck disable=SC2086
step streams "${STREAMS_LIMIT:-300}" "$py" benchmarks/bench_streaming.py --device "$device" --left 4 --slots on \
  --seconds 8 --streams $streams
step noslots 120 "$py" benchmarks/bench_streaming.py --device "$device" --left 4 --slots off \
  --seconds 8 --streams 256
