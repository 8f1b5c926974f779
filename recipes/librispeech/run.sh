#!/usr/bin/env bash
# LibriSpeech streaming Conformer-CTC (conf/conformer_u2.yaml: one dynamic-chunk model serves
# full context and every chunk size). With --config conf/conformer_u2_hybrid.yaml the same
# model also trains a transducer head (docs/heads.md): decode it with --mode transducer_greedy
# or transducer_beam.
#
# Punctuation and casing (docs/readable.md) are trained from text, not by this script: use the
# LibriSpeech books as published (Project Gutenberg's texts of the books the corpus reads,
# cased and punctuated), never the normalised librispeech-lm-norm.txt, which has no marks and
# no case: wenet-lite train-punct --text books.txt --out exp/punct; then --punct exp/punct on
# transcribe, stream and serve.
#
#   recipes/librispeech/run.sh [--stage N] [--stop-stage M] [--ngpu 8] [--dl-dir /data] ...
#
# Run from the repository root. Stages:
#   0  download the parts from openslr.org (resource 12) into $dl_dir; a part that is already
#      unpacked ($dl_dir/LibriSpeech/<part>) is skipped, so data you have is never fetched;
#      and the word LM $lm (an ARPA file of resource 11) unless it is already there
#   1  prepare:   wenet-lite prepare librispeech          -> $data/<part>/cuts.jsonl.gz
#   2  CMVN:      wenet-lite compute-cmvn on $cmvn_utts training utterances -> $data/cmvn.json
#                 with --store-fbank true also wenet-lite compute-fbank for each training part
#                 (-> $data/<part>/fbank/, ~60 MB per audio hour; worth it with few CPU cores
#                 per GPU; with speed perturbation only the speed-1.0 draws use it)
#   3  train:     torchrun --nproc_per_node $ngpu -m wenet_lite train (rank 0 first trains the
#                 sentencepiece tokenizer on the training transcripts; --resume continues)
#   4  average:   wenet-lite average (newest $average_num checkpoints)
#   5  decode test-clean and test-other: full context, greedy and (unless --lm "") prefix
#                 beam with the word LM $lm, its weight and bonus tuned on dev-clean
#                 ($lm_grid); chunk 16/8/4 both chunk-masked and simulated streaming (chunk
#                 by chunk with caches); simulated streaming with the LM at chunk $lm_chunk;
#                 with $rescore (U2++), prefix beam $rescore_beam and attention rescoring of
#                 its n-best, full context and simulated streaming at $rescore_chunk (and
#                 with the LM)
#   6  stream:    wenet-lite stream --ref over both test sets at chunk 16/8/4 (and at $lm_chunk
#                 with the word LM; rescored at $rescore_chunk), scored and compared with
#                 simulated streaming
#   7  export:    TorchScript and ONNX (+int8) for chunk $export_chunk, left $export_left
#   8  results:   recipes/common/results_table.py (from every summary.json) -> $exp/RESULTS.md,
#                 recipes/common/plot_training.py
# Options: --name value (dashes or underscores) or environment variables of the same name.
#
# Expected cost: an ESTIMATE (no GPU run of this recipe has been made), derived in docs/recipes.md
# ("Expected training cost"): ~7 GFLOP per trained audio-second for the 35 M-parameter model, so 80
# epochs of 960 h are ~2e18 FLOP, roughly 5-15 hours on one H100-class GPU (1-2 h on 8) when
# each GPU has enough data-loader CPU cores; train_set=train-clean-100 costs ~10x less.
set -euo pipefail

stage=${stage:-0}
stop_stage=${stop_stage:-100}
dl_dir=${dl_dir:-download}        # LibriSpeech/<part>/... lands (or already is) here
mirror=${mirror:-https://www.openslr.org/resources/12}   # or https://us.openslr.org/resources/12
data=${data:-data/librispeech}
exp=${exp:-exp/librispeech_u2}
config=${config:-conf/conformer_u2.yaml}
overrides=${overrides:-}          # space-separated KEY=VALUE config overrides for training
ngpu=${ngpu:-$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)}
jobs=${jobs:-${nj:-8}}  # parallel header readers and CMVN loader workers
cmvn_utts=${cmvn_utts:-20000}     # utterances spread over the training set for CMVN (0: all)
store_fbank=${store_fbank:-false} # true: store the training fbank once (stage 2)
train_set=${train_set:-train-clean-100,train-clean-360,train-other-500}
dev_set=${dev_set:-dev-clean}
test_sets=${test_sets:-"test-clean test-other"}
average_num=${average_num:-5}
chunks=${chunks:-"16 8 4"}
stream_chunks=${stream_chunks:-"16 8 4"}
stream_device=${stream_device:-cpu}
export_chunk=${export_chunk:-16}
export_left=${export_left:-4}
# Word LM for stage 5: a file name of openslr.org/11 (fetched into $dl_dir), a path to your own
# ARPA or `wenet-lite train-lm` file, or "" for none. Stage 5 first decodes the first dev part
# with each weight:bonus pair of lm_grid and keeps the best ("": use lm_weight, word_bonus).
lm=${lm:-3-gram.pruned.1e-7.arpa.gz}
lm_mirror=${lm_mirror:-https://www.openslr.org/resources/11}
lm_grid=${lm_grid-"0.3:1.5 0.3:2.5 0.4:2.0 0.4:3.0 0.5:2.5 0.5:3.5"}
lm_beam=${lm_beam:-20}
token_min_logp=${token_min_logp--5}  # per frame, only tokens above this log-prob ("": top lm_beam)
lm_weight=${lm_weight:-0.4}       # without lm_grid: the toolkit defaults, chosen on the
word_bonus=${word_bonus:-2.5}     # synthetic corpus
oov_penalty=${oov_penalty:-3.0}
lm_chunk=${lm_chunk-16}           # streaming with the LM at this chunk: stage 5 simulates it,
                                  # stage 6 streams it and compares ("": neither)
rescore=${rescore:-true}          # attention rescoring rows (the config needs a decoder, as
rescore_beam=${rescore_beam:-10}  # conf/conformer_u2.yaml has): prefix beam 10 as WeNet's
rescore_chunk=${rescore_chunk-16} # U2++ results, at full context and this chunk ("": full only)
rescore_lm_ctc_weight=${rescore_lm_ctc_weight:-8.0}  # with the LM: the search score's weight
                                  # (the synthetic corpus's dev choice; tune it on yours)

while [ $# -gt 0 ]; do
  case "$1" in
    --*)
      name=${1#--}; name=${name//-/_}
      if [ $# -lt 2 ]; then echo "$0: option $1 needs a value" >&2; exit 2; fi
      case "$name" in
        stage|stop_stage|dl_dir|mirror|data|exp|config|overrides|ngpu|jobs|cmvn_utts|store_fbank|\
train_set|dev_set|test_sets|average_num|chunks|stream_chunks|stream_device|export_chunk|export_left|\
lm|lm_mirror|lm_grid|lm_beam|token_min_logp|lm_weight|word_bonus|oov_penalty|lm_chunk|\
rescore|rescore_beam|rescore_chunk|rescore_lm_ctc_weight)
          printf -v "$name" '%s' "$2" ;;
        nj) jobs=$2 ;;  # the older spelling of --jobs
        *) echo "$0: unknown option $1" >&2; exit 2 ;;
      esac
      shift 2 ;;
    *) echo "$0: unexpected argument $1" >&2; exit 2 ;;
  esac
done

model=$exp/avg_${average_num}.pt
lm_file=$lm                       # a path of yours, or where stage 0 puts openslr's file
if [ -n "$lm" ] && [ ! -f "$lm" ]; then lm_file=$dl_dir/$lm; fi
set_args=()
for kv in $overrides; do set_args+=(--set "$kv"); done
all_parts="${train_set//,/ } ${dev_set//,/ } $test_sets"

log() { echo "$(date '+%H:%M:%S') [stage $1] ${*:2}"; }
run_stage() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
lm_search() {  # lm_search WEIGHT BONUS: lm_flags = the LM search flags of decode and stream
  lm_flags=(--mode prefix_beam --beam "$lm_beam" ${token_min_logp:+--token-min-logp "$token_min_logp"}
            --lm "$lm_file" --lm-weight "$1" --word-bonus "$2" --oov-penalty "$oov_penalty")
}
lm_decode() {  # lm_decode PART OUT WEIGHT BONUS [decode options]: prefix beam with the word LM
  lm_search "$3" "$4"
  wenet-lite decode --device auto --model "$model" --data "$data/$1" "${lm_flags[@]}" --out "$2" "${@:5}"
}
beam_decode() {  # beam_decode PART OUT MODE [decode options]: prefix beam $rescore_beam, plain
  # (MODE prefix_beam) or with its n-best rescored (attention_rescoring)
  wenet-lite decode --device auto --model "$model" --data "$data/$1" --mode "$3" --beam "$rescore_beam" \
    --out "$2" "${@:4}"
}
tune_lm() {  # decode the first dev part with each lm_grid pair; keep the lowest WER's (CER's)
  local part=${dev_set%%,*} best="" pair w b dir score
  for pair in $lm_grid; do
    case "$pair" in
      *:*) w=${pair%%:*}; b=${pair#*:} ;;
      *) echo "$0: lm_grid pairs are WEIGHT:BONUS, got '$pair'" >&2; exit 2 ;;
    esac
    dir=$exp/decode/$part/lm_w${w}_b${b}
    log 5 "tune the word LM on $part: weight $w, bonus $b"
    lm_decode "$part" "$dir" "$w" "$b"
    score=$(awk '/^(WER|CER) / { printf "%s ", $2 }' "$dir/summary.txt")  # "WER CER "
    if [ -z "$best" ] || awk -v a="$score" -v b="$best" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        exit !(x[1] < y[1] || (x[1] == y[1] && x[2] < y[2])) }'; then
      best=$score; lm_weight=$w; word_bonus=$b
    fi
  done
  read -r wer cer <<< "$best"
  log 5 "best on $part: weight $lm_weight, bonus $word_bonus (WER $wer %, CER $cer %)"
}

if run_stage 0; then
  mkdir -p "$dl_dir"
  for part in $all_parts; do
    # The archive is deleted only after it unpacked, so a leftover one means: not finished.
    if [ -d "$dl_dir/LibriSpeech/$part" ] && [ ! -f "$dl_dir/$part.tar.gz" ]; then
      log 0 "$dl_dir/LibriSpeech/$part exists, not downloading"
      continue
    fi
    log 0 "download $mirror/$part.tar.gz"
    wget --continue --tries 10 -O "$dl_dir/$part.tar.gz" "$mirror/$part.tar.gz"
    tar -xzf "$dl_dir/$part.tar.gz" -C "$dl_dir"
    rm "$dl_dir/$part.tar.gz"
  done
  if [ -n "$lm" ] && [ ! -f "$lm_file" ]; then
    log 0 "download the word LM $lm_mirror/$lm"
    wget --continue --tries 10 -O "$lm_file.part" "$lm_mirror/$lm"
    mv "$lm_file.part" "$lm_file"
  fi
fi

if run_stage 1; then
  log 1 "prepare $all_parts"
  parts=$(echo "$all_parts" | tr -s ' ' ',')
  wenet-lite prepare librispeech --root "$dl_dir" --parts "$parts" --out "$data" --jobs "$jobs"
fi

if run_stage 2; then
  log 2 "CMVN of $train_set"
  train_dirs=()
  for part in ${train_set//,/ }; do train_dirs+=("$data/$part"); done
  wenet-lite compute-cmvn --config "$config" --data "${train_dirs[@]}" --out "$data/cmvn.json" \
    --jobs "$jobs" --max-utts "$cmvn_utts"
  if [ "$store_fbank" = true ]; then
    log 2 "store the training fbank of $train_set"
    wenet-lite compute-fbank --config "$config" --data "${train_dirs[@]}" --jobs "$jobs" \
      --no-progress "${set_args[@]}"
  fi
fi

if run_stage 3; then
  args=(train --config "$config" --data "$data" --exp "$exp" --train-part "$train_set"
        --dev-part "$dev_set" --resume --no-progress "${set_args[@]}")
  # Stored fbank is read by the DataLoader workers; on a GPU the fbank is otherwise computed
  # there from the audio (data.fbank: auto), which would leave the stored arrays unused.
  if [ "$store_fbank" = true ]; then args+=(--set data.fbank=workers); fi
  if [ "$ngpu" -gt 0 ]; then
    log 3 "train with torchrun, $ngpu processes (one per GPU) -> $exp"
    torchrun --standalone --nproc_per_node "$ngpu" -m wenet_lite "${args[@]}" --device cuda
  else
    log 3 "train on CPU (no GPU found; set --ngpu N to use GPUs) -> $exp"
    wenet-lite "${args[@]}" --device cpu
  fi
fi

if run_stage 4; then
  log 4 "average the newest $average_num checkpoints -> $model"
  wenet-lite average --exp "$exp" --num "$average_num" --out "$model"
fi

if run_stage 5; then
  if [ -n "$lm" ] && [ ! -f "$lm_file" ]; then
    echo "$0: word LM $lm_file not found: run stage 0 to fetch it, or pass --lm PATH" \
      "(--lm \"\" for none)" >&2
    exit 1
  fi
  if [ -n "$lm" ]; then
    if [ -n "$lm_grid" ]; then tune_lm; fi
    mkdir -p "$exp/decode"
    echo "$lm_weight $word_bonus" > "$exp/decode/lm_weight_bonus.txt"  # for stage 6
  fi
  for test in $test_sets; do
    out=$exp/decode/$test
    log 5 "decode $test: full context"
    wenet-lite decode --device auto --model "$model" --data "$data/$test" --out "$out/full"
    if [ -n "$lm" ]; then
      log 5 "decode $test: full context, prefix beam $lm_beam with the word LM $lm_file"
      lm_decode "$test" "$out/full_lm" "$lm_weight" "$word_bonus"
      if [ -n "$lm_chunk" ]; then
        log 5 "decode $test: chunk $lm_chunk, simulated streaming with the word LM"
        lm_decode "$test" "$out/chunk${lm_chunk}_sim_lm" "$lm_weight" "$word_bonus" \
          --chunk-size "$lm_chunk" --simulate-streaming
      fi
    fi
    if [ "$rescore" = true ]; then
      log 5 "decode $test: prefix beam $rescore_beam, and attention rescoring of its n-best"
      sim=()
      [ -n "$rescore_chunk" ] && sim=(--chunk-size "$rescore_chunk" --simulate-streaming)
      for where in full ${rescore_chunk:+chunk${rescore_chunk}_sim}; do
        opts=()
        [ "$where" != full ] && opts=("${sim[@]}")
        beam_decode "$test" "$out/${where}_beam" prefix_beam "${opts[@]}"
        beam_decode "$test" "$out/${where}_rescore" attention_rescoring "${opts[@]}"
        if [ -n "$lm" ]; then  # the LM's beam and weights, its n-best rescored
          lm_search "$lm_weight" "$word_bonus"
          wenet-lite decode --device auto --model "$model" --data "$data/$test" "${lm_flags[@]}" \
            --mode attention_rescoring --ctc-weight "$rescore_lm_ctc_weight" \
            --out "$out/${where}_lm_rescore" "${opts[@]}"
        fi
      done
    fi
    for c in $chunks; do
      log 5 "decode $test: chunk $c, chunk-masked and simulated streaming"
      wenet-lite decode --device auto --model "$model" --data "$data/$test" --chunk-size "$c" \
        --out "$out/chunk$c"
      wenet-lite decode --device auto --model "$model" --data "$data/$test" --chunk-size "$c" \
        --simulate-streaming --out "$out/chunk${c}_sim"
    done
  done
fi

stream_test() {  # stream_test TEST NAME SIM [stream options]: stream TEST's audio (JSON lines
  # in NAME.jsonl), score it into NAME/ and compare with the simulated streaming decode SIM
  local out=$exp/decode/$1 compare=()
  mkdir -p "$out"
  log 6 "stream $1 -> $2 (32 streams batched, no endpointing): ${*:4}"
  [ -f "$out/$3/hyp.txt" ] && compare=(--compare "$out/$3")
  wenet-lite stream --model "$model" --no-endpoint --json --max-streams 32 \
    --device "$stream_device" "${@:4}" --ref "$data/$1" --out "$out/$2" "${compare[@]}" \
    > "$out/$2.jsonl"
  cat "$out/$2/summary.txt"
}

if run_stage 6; then
  if [ -n "$lm" ] && [ -f "$exp/decode/lm_weight_bonus.txt" ]; then
    read -r lm_weight word_bonus < "$exp/decode/lm_weight_bonus.txt"  # what stage 5 used
  fi
  for test in $test_sets; do
    for c in $stream_chunks; do
      stream_test "$test" "stream$c" "chunk${c}_sim" --chunk-size "$c"
    done
    if [ -n "$lm" ] && [ -n "$lm_chunk" ]; then
      lm_search "$lm_weight" "$word_bonus"
      stream_test "$test" "stream${lm_chunk}_lm" "chunk${lm_chunk}_sim_lm" \
        --chunk-size "$lm_chunk" "${lm_flags[@]}"
    fi
    if [ "$rescore" = true ] && [ -n "$rescore_chunk" ]; then
      stream_test "$test" "stream${rescore_chunk}_rescore" "chunk${rescore_chunk}_sim_rescore" \
        --chunk-size "$rescore_chunk" --mode attention_rescoring --beam "$rescore_beam"
      if [ -n "$lm" ]; then
        lm_search "$lm_weight" "$word_bonus"
        stream_test "$test" "stream${rescore_chunk}_lm_rescore" \
          "chunk${rescore_chunk}_sim_lm_rescore" --chunk-size "$rescore_chunk" \
          "${lm_flags[@]}" --mode attention_rescoring --ctc-weight "$rescore_lm_ctc_weight"
      fi
    fi
  done
fi

if run_stage 7; then
  log 7 "export TorchScript and ONNX (+int8), chunk $export_chunk, left $export_left"
  wenet-lite export --model "$model" --format torchscript --chunk-size "$export_chunk" \
    --left-chunks "$export_left" --out "$exp/export/model.ts"
  wenet-lite export --model "$model" --format onnx --chunk-size "$export_chunk" \
    --left-chunks "$export_left" --int8 --out "$exp/export/onnx"
fi

if run_stage 8; then
  log 8 "results table and training curves"
  test_args=()
  for test in $test_sets; do test_args+=(--test "$data/$test"); done
  for part in ${train_set//,/ }; do test_args+=(--train-data "$data/$part"); done
  python3 recipes/common/plot_training.py --exp "$exp"
  python3 recipes/common/results_table.py --exp "$exp" --model "$model" \
    "${test_args[@]}" \
    --note "Config: $config${overrides:+, overrides: $overrides}; train: $train_set; $ngpu GPU(s)."
fi
