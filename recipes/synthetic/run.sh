#!/usr/bin/env bash
# The LibriSpeech recipe's stages on a generated LibriSpeech-layout corpus, on CPU.
#
#   recipes/synthetic/run.sh [--stage N] [--stop-stage M] [--hours 3] [--exp exp/synthetic] ...
#   SMOKE=1 recipes/synthetic/run.sh        # 0.02 h, tiny model, 200 steps: end to end in ~1.5 min
#
# Run from the repository root (after `pip install -e ".[dev]"` and the apt packages of the
# README and docs/getting-started.md). Stages:
#   0  generate the corpus: recipes/synthetic/local/make_synthetic_librispeech.py (skipped when it exists)
#   1  prepare:        wenet-lite prepare librispeech   -> $data/<part>/cuts.jsonl.gz
#   2  CMVN:           wenet-lite compute-cmvn          -> $data/cmvn.json
#      features:       wenet-lite compute-fbank         -> $data/train-clean-100/fbank/
#                      (computed once instead of every epoch: 1.4x faster training on 2 cores)
#   3  train:          wenet-lite train (trains the tokenizer first; --resume continues;
#                      --init MODEL.pt fine-tunes that model, with its tokenizer and CMVN;
#                      --heads hybrid: CTC first for --ctc-share of the steps, then the
#                      transducer head added to it by train --init for the rest; --heads
#                      cr-ctc: the same, the consistency loss and SpecAugment added instead)
#   4  average:        wenet-lite average               -> $exp/avg_$average_num.pt
#   5  decode test-clean: full context (greedy, and prefix beam with a word bigram LM of the
#                      corpus's LM text from `wenet-lite train-lm`: the whole train sentence
#                      pool, none of it in dev or test; with the LM also simulated streaming
#                      at chunk $lm_chunk; with and without the LM, biased by hotwords: the
#                      test words unseen in training, and an unrelated list), and for
#                      each chunk in $chunks the chunk-masked forward and simulated streaming
#                      (chunk by chunk with caches); with $rescore, attention rescoring of
#                      the prefix beam's n-best (full context and simulated streaming at
#                      $rescore_chunk, each with and without the LM) beside the plain beam; for a model
#                      with a transducer head, its greedy and modified beam searches; with
#                      $punct, a punctuation and casing model of the fortune text and
#                      documentation prose, scored on legal prose it never saw
#   6  stream test-clean with `wenet-lite stream --ref` for each chunk in $stream_chunks (and
#                      with the LM at $lm_chunk; rescored with and without it at
#                      $rescore_chunk), scored and compared with the simulated streaming
#                      transcripts; stream one file with endpointing as a live stream would
#                      be printed
#   7  export TorchScript and ONNX (each fp32 and int8; ONNX with decoder.onnx when the model
#                      has a decoder); stream the test set through them with
#                      examples/run_exported.py (also --rescore) and sherpa-onnx
#                      (examples/run_sherpa.py), scored by `wenet-lite score`
#   8  plots (training curves, CTC posteriors, attention weights, the decoder's
#                      cross-attention) and $exp/RESULTS.md (from
#                      the summary.json of every decode, stream and score)
# Every option below can be given as --name value (dashes or underscores) or set in the
# environment beforehand. Extra training settings: --overrides "train.max_steps=3000 ...".
set -euo pipefail

stage=${stage:-0}
stop_stage=${stop_stage:-100}
smoke=${SMOKE:-0}
hours=${hours:-6}                 # hours of training audio (dev and test add 5 % each, <= 0.25 h)
seed=${seed:-0}
jobs=${jobs:-${nj:-2}}  # parallel synthesisers / header readers
config=${config:-conf/synthetic_small.yaml}
overrides=${overrides:-}          # space-separated KEY=VALUE config overrides for training
init=${init:-}                    # a model file to fine-tune from (train --init)
heads=${heads:-config}            # config: the heads the config trains; hybrid: a curriculum, the
                                  # config's model trained first, then a transducer head added by
                                  # train --init (the standard cure for a transducer's slow start);
                                  # cr-ctc: the same curriculum into CR-CTC
ctc_share=${ctc_share:-0.5}       # hybrid, cr-ctc: the share of train.max_steps the first part trains
transducer_sets=${transducer_sets:-"model.transducer_weight=0.75"}  # hybrid: its second part's
# cr-ctc: its second part's settings; the encoder has learnt CTC already, so the consistency
# loss ramps in over 500 steps instead of the 2,000 that keep two untrained views from pulling
# each other towards blank
cr_ctc_sets=${cr_ctc_sets:-"model.cr_ctc_weight=0.2 model.cr_warmup_steps=500 specaug.enabled=true specaug.start_step=0"}
average_num=${average_num:-5}
chunks=${chunks:-"16 4"}          # decoded chunk sizes (encoder frames of 40 ms)
stream_chunks=${stream_chunks:-"16 4"}
lm_beam=${lm_beam:-20}            # stage 5's prefix beam search with the word LM
token_min_logp=${token_min_logp--5}  # ... trying only tokens above this log-prob per frame
                                  # ("": all of the frame's top lm_beam tokens)
lm_weight=${lm_weight:-0.4}       # LM weight, per-word bonus, penalty per word outside the
word_bonus=${word_bonus:-2.5}     # LM's vocabulary, and blank logit penalty (tuned on dev,
oov_penalty=${oov_penalty:-3.0}   # docs/results.md)
blank_penalty=${blank_penalty:-0.7}
lm_text=${lm_text:-}              # LM training text; default: the corpus's
                                  # librispeech-lm-norm.txt.gz if any, else the train transcripts
lm_chunk=${lm_chunk-16}           # streaming with the LM at this chunk: simulated (stage 5) and
                                  # streamed (stage 6) ("": neither)
hotwords=${hotwords:-true}         # stage 5 also measures hotwords: the test words unseen in
                                  # training as the list, and as many unrelated words
hotwords_score=${hotwords_score:-0.75}  # bonus per matched hotword token (chosen on dev)
rescore=${rescore:-auto}          # stages 5-8 also decode with attention rescoring (U2++): auto
                                  # when the model has an attention decoder (the default config has
                                  # none; --overrides decoder.type=bitransformer trains one)
rescore_chunk=${rescore_chunk-16} # ... simulated and streamed at this chunk ("": full context only)
punct=${punct:-true}              # stage 5 also trains a punctuation and casing model on the fortune
                                  # text (recipes/synthetic/local/fortune_text.py) and the prose of
                                  # Python's and Linux's manuals where installed (prose_text.py; 5 %
                                  # held out), scores it on the licences' legal prose (never
                                  # trained on), and RESULTS.md reports both beside the baseline's
punct_steps=${punct_steps:-"--max-steps 2400 --dim 128 --precision bf16"}  # its size (bf16 where native)
transducer=${transducer:-auto}    # stage 5 also decodes with the transducer head (greedy and modified
                                  # beam, full context; greedy simulated at each chunk): auto when
                                  # the model has one (e.g. --overrides model.transducer_weight=0.75)
rescore_lm_ctc_weight=${rescore_lm_ctc_weight:-8.0}  # with the LM, the weight of the search
                                  # score (LM included) against the decoder's: chosen on dev
                                  # (0.5 38.45 -> 40.42 % WER, 2.0 38.92, 8.0 38.15)
device=${device:-auto}            # train, decode and stream on this device (auto: cuda when
                                  # present, else cpu); e.g. --device cpu, --device cuda
export_chunk=${export_chunk:-16}
export_left=${export_left:-4}
test_part=${test_part:-test-clean}  # the part stages 5-8 decode, e.g. test-other: test-clean's
                                  # sentences read by voices training never hears
left_chunks=${left_chunks:--1}  # history chunks of chunked decoding and streaming (-1: all, as trained)
if [ "$smoke" = 1 ]; then
  hours=${smoke_hours:-0.02}
  config=conf/tiny_test.yaml
  overrides="train.max_steps=200 train.max_epochs=100 data.max_batch_seconds=20 $overrides"
  overrides="decoder.type=bitransformer decoder.num_blocks=1 decoder.r2l_num_blocks=1 $overrides"
  average_num=3
  chunks="16 4"
  stream_chunks="16 4"
  tag=_smoke
else
  tag=
fi
corpus=${corpus:-data/synthetic${tag}_corpus}   # holds LibriSpeech/<part>/...
data=${data:-data/synthetic${tag}}              # prepared manifests and CMVN
exp=${exp:-exp/synthetic${tag}}

while [ $# -gt 0 ]; do
  case "$1" in
    --*)
      name=${1#--}; name=${name//-/_}
      if [ $# -lt 2 ]; then echo "$0: option $1 needs a value" >&2; exit 2; fi
      case "$name" in
        stage|stop_stage|hours|seed|jobs|config|overrides|average_num|chunks|stream_chunks|\
lm_beam|token_min_logp|lm_weight|word_bonus|oov_penalty|blank_penalty|lm_text|lm_chunk|\
hotwords|hotwords_score|rescore|rescore_chunk|rescore_lm_ctc_weight|transducer|punct|punct_steps|device|export_chunk|\
export_left|left_chunks|corpus|data|exp|init|test_part|heads|ctc_share|transducer_sets|cr_ctc_sets)
          printf -v "$name" '%s' "$2" ;;
        nj) jobs=$2 ;;  # the older spelling of --jobs
        *) echo "$0: unknown option $1" >&2; exit 2 ;;
      esac
      shift 2 ;;
    *) echo "$0: unexpected argument $1" >&2; exit 2 ;;
  esac
done
case "$heads" in
  config|hybrid|cr-ctc) ;;
  *) echo "$0: --heads is config, hybrid or cr-ctc, not '$heads'" >&2; exit 2 ;;
esac

resolve_lm_text() {  # after stage 0, which writes the corpus's LM text
  if [ -z "$lm_text" ] && [ -f "$corpus/librispeech-lm-norm.txt.gz" ]; then
    lm_text=$corpus/librispeech-lm-norm.txt.gz
  fi
}
model=$exp/avg_${average_num}.pt
decode_dir=$exp/decode/$test_part
set_args=()
for kv in $overrides; do set_args+=(--set "$kv"); done
device_args=()
if [ -n "$device" ]; then device_args=(--device "$device"); fi
init_args=()
if [ -n "$init" ]; then init_args=(--init "$init"); fi

log() { echo "$(date '+%H:%M:%S') [stage $1] ${*:2}"; }
run_stage() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
# in_parallel "FUNC ARGS" ...: calls of the functions below, two at a time with one thread each
# (on 2 cores two one-thread decodes finish ~1.7x sooner than one after the other with two
# threads each), the next one starting when one ends: give the longest first. Each call's
# output is printed in the given order once all are done; fails if any failed.
in_parallel() {
  local dir job running=0 status=0 pids=() i
  dir=$(mktemp -d)
  for job in "$@"; do
    if [ "$running" -ge 2 ]; then wait -n || true; running=$((running - 1)); fi
    OMP_NUM_THREADS=1 $job > "$dir/${#pids[@]}" 2>&1 & pids+=($!)
    running=$((running + 1))
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=$?  # each one's own exit status, even if wait -n took it
    cat "$dir/$i"
  done
  rm -rf "$dir"
  return "$status"
}
test_audio() { find -L "$corpus/LibriSpeech/$test_part" -name '*.flac' | sort; }

if run_stage 0; then
  if [ -f "$corpus/LibriSpeech/SYNTHETIC.json" ]; then
    log 0 "corpus exists: $corpus (delete it to generate again)"
  else
    log 0 "generating $hours h of synthetic speech into $corpus"
    python3 recipes/synthetic/local/make_synthetic_librispeech.py --out "$corpus" --hours "$hours" --seed "$seed" \
      --jobs "$jobs"
  fi
fi

if run_stage 1; then
  log 1 "prepare $corpus -> $data"
  wenet-lite prepare librispeech --root "$corpus" --out "$data" --jobs "$jobs"
fi

if run_stage 2; then
  log 2 "CMVN of train-clean-100 (2000 utterances spread over it)"
  wenet-lite compute-cmvn --config "$config" --data "$data/train-clean-100" \
    --out "$data/cmvn.json" --jobs "$jobs" --max-utts 2000
  log 2 "store the training fbank of train-clean-100"
  wenet-lite compute-fbank --config "$config" --data "$data/train-clean-100" --jobs "$jobs" \
    --no-progress "${set_args[@]}"
fi

train_exp() {  # train_exp EXP [extra args]: stage 3's training into EXP
  wenet-lite train --config "$config" --data "$data" --exp "$1" \
    --train-part train-clean-100 --dev-part dev-clean --resume --no-progress "${set_args[@]}" \
    "${device_args[@]}" "${@:2}"
}

if run_stage 3; then
  if [ "$heads" = hybrid ] || [ "$heads" = cr-ctc ]; then
    if [ "$heads" = hybrid ]; then second_sets=$transducer_sets; else second_sets=$cr_ctc_sets; fi
    total=$(python3 -c "import sys; from wenet_lite.config import load_config
print(load_config(sys.argv[1], sys.argv[2:]).train.max_steps)" "$config" $overrides)
    first=$(python3 -c "print(max(1, int(round($total * $ctc_share))))")
    log 3 "$heads curriculum: $config for $first of $total steps -> $exp/first, then ${second_sets} for the rest -> $exp"
    train_exp "$exp/first" --set "train.max_steps=$first" "${init_args[@]}"
    wenet-lite average --exp "$exp/first" --num "$average_num" --out "$exp/first/avg_$average_num.pt"
    second=()
    for kv in $second_sets; do second+=(--set "$kv"); done
    train_exp "$exp" --init "$exp/first/avg_$average_num.pt" --set "train.max_steps=$((total - first))" \
      "${second[@]}"
  else
    log 3 "train $config -> $exp ${overrides:+(overrides: $overrides)}"
    train_exp "$exp" "${init_args[@]}"
  fi
fi

if run_stage 4; then
  log 4 "average the newest $average_num checkpoints -> $model"
  wenet-lite average --exp "$exp" --num "$average_num" --out "$model"
fi

decode_test() {  # decode_test NAME [decode options]: $decode_dir/NAME
  wenet-lite decode --model "$model" --data "$data/$test_part" --out "$decode_dir/$1" \
    --left-chunks "$left_chunks" "${device_args[@]}" "${@:2}"
}
train_lm() {  # the word LM of stage 5 (after resolve_lm_text)
  local lm_source=(--data "$data/train-clean-100")
  if [ -n "$lm_text" ]; then lm_source=(--text "$lm_text"); fi
  wenet-lite train-lm "${lm_source[@]}" --out "$exp/lm.json"
}
beam_opts=(--beam "$lm_beam" ${token_min_logp:+--token-min-logp "$token_min_logp"})
lm_opts=(--lm "$exp/lm.json" --lm-weight "$lm_weight" --word-bonus "$word_bonus"
         --oov-penalty "$oov_penalty" --blank-penalty "$blank_penalty")
lm_search=(--mode prefix_beam "${beam_opts[@]}" "${lm_opts[@]}")
rescore_search=(--mode attention_rescoring "${beam_opts[@]}")  # the beam's n-best, rescored
lm_rescore=("${rescore_search[@]}" "${lm_opts[@]}" --ctc-weight "$rescore_lm_ctc_weight")
decode_lm() {  # decode_lm NAME [decode options]: decode_test with the word LM
  decode_test "$1" "${lm_search[@]}" "${@:2}"
}
beam_search=(--mode prefix_beam "${beam_opts[@]}")
has_transducer() {  # whether $model has a transducer head
  python3 -c "import sys; from wenet_lite import load_model
sys.exit(0 if load_model(sys.argv[1])[0].transducer is not None else 1)" "$model"
}
resolve_rescore() {  # rescore=auto: true when $model has an attention decoder
  if [ "$rescore" = auto ]; then
    if python3 -c "import sys; from wenet_lite import load_model
sys.exit(0 if load_model(sys.argv[1])[0].decoder is not None else 1)" "$model"; then
      rescore=true
    else
      rescore=false
    fi
  fi
}
hot() {  # hot LIST: the flags of a decode biased towards $exp/hotwords/LIST.txt
  echo "--hotwords $exp/hotwords/$1.txt --hotwords-score $hotwords_score"
}
stream_test() {  # stream_test C [lm|rescore|lm_rescore]: stream the test set at chunk C, scored
  local name=stream$1${2:+_$2} sim=chunk$1_sim${2:+_$2} compare=() search=()
  case "${2:-}" in
    lm) search=("${lm_search[@]}") ;;
    rescore) search=("${rescore_search[@]}") ;;
    lm_rescore) search=("${lm_rescore[@]}") ;;
  esac
  [ -f "$decode_dir/$sim/hyp.txt" ] && compare=(--compare "$decode_dir/$sim")
  wenet-lite stream --model "$model" --chunk-size "$1" --no-endpoint --json --max-streams 8 \
    --left-chunks "$left_chunks" "${device_args[@]}" \
    "${search[@]}" --ref "$data/$test_part" --out "$decode_dir/$name" "${compare[@]}" \
    > "$decode_dir/$name.jsonl"
  cat "$decode_dir/$name/summary.txt"
}

if run_stage 5; then
  resolve_rescore
  resolve_lm_text
  log 5 "word LM of ${lm_text:-the training transcripts} -> $exp/lm.json"
  train_lm
  if [ "$punct" = true ]; then
    log 5 "punctuation and casing model of the fortune text and documentation prose -> $exp/punct"
    python3 recipes/synthetic/local/fortune_text.py --out "$data/fortunes.txt"
    punct_texts=(--text "$data/fortunes.txt")
    docs_words=3000000; [ "$smoke" = 1 ] && docs_words=20000
    if python3 recipes/synthetic/local/prose_text.py --docs "$data/docs.txt" --max-words $docs_words; then
      punct_texts+=(--text "$data/docs.txt")
    else
      log 5 "no documentation prose installed: the fortune text alone (apt-get install python3-doc linux-doc)"
    fi
    if [ "$smoke" = 1 ]; then punct_size=(--max-steps 20 --dim 32); else punct_size=($punct_steps); fi
    wenet-lite train-punct "${punct_texts[@]}" --out "$exp/punct" "${punct_size[@]}" --no-progress
    # scored on legal prose, a kind of text it never saw: the licences every Debian system holds
    if python3 recipes/synthetic/local/prose_text.py --legal "$data/legal.txt"; then
      wenet-lite punctuate --model "$exp/punct" --score "$data/legal.txt" --json > "$exp/punct/score_legal.json"
    fi
  fi
  log 5 "decode $test_part: full context greedy and with the word LM${lm_chunk:+ (also simulated streaming at chunk $lm_chunk)}; chunk ${chunks// /, }: chunk-masked and simulated streaming (two decodes at a time)"
  tasks=("decode_lm full_lm")  # the longest first
  if [ "$hotwords" = true ]; then
    log 5 "hotword lists: test words never in the training text, and as many unrelated words"
    python3 recipes/synthetic/local/hotword_lists.py --train-data "$data/train-clean-100" --test "$data/$test_part" \
      ${lm_text:+--lm-text "$lm_text"} --out-dir "$exp/hotwords"
    tasks+=("decode_lm full_lm_hot $(hot unseen)" "decode_lm full_lm_unrelated $(hot unrelated)")
    tasks+=("decode_test full_beam_hot ${beam_search[*]} $(hot unseen)")
    tasks+=("decode_test full_beam_unrelated ${beam_search[*]} $(hot unrelated)")
  fi
  if [ "$hotwords" = true ] || [ "$rescore" = true ]; then
    tasks+=("decode_test full_beam ${beam_search[*]}")
  fi
  if [ "$rescore" = true ]; then
    log 5 "attention rescoring of the prefix beam's n-best${rescore_chunk:+ (also simulated streaming at chunk $rescore_chunk)}, with and without the LM"
    tasks+=("decode_test full_lm_rescore ${lm_rescore[*]}")
    tasks+=("decode_test full_rescore ${rescore_search[*]}")
    if [ -n "$rescore_chunk" ]; then
      sim="--chunk-size $rescore_chunk --simulate-streaming"
      tasks+=("decode_test chunk${rescore_chunk}_sim_lm_rescore ${lm_rescore[*]} $sim")
      tasks+=("decode_test chunk${rescore_chunk}_sim_rescore ${rescore_search[*]} $sim")
      tasks+=("decode_test chunk${rescore_chunk}_sim_beam ${beam_search[*]} $sim")
    fi
  fi
  if [ -n "$lm_chunk" ]; then
    tasks+=("decode_lm chunk${lm_chunk}_sim_lm --chunk-size $lm_chunk --simulate-streaming")
  fi
  if [ "$transducer" = true ] || { [ "$transducer" = auto ] && has_transducer; }; then
    log 5 "the transducer head: greedy and modified beam search (full context), greedy simulated streaming at chunk ${chunks// /, }"
    tasks+=("decode_test full_tbeam --mode transducer_beam --beam 4")
    tasks+=("decode_test full_tgreedy --mode transducer_greedy")
    for c in $chunks; do
      tasks+=("decode_test chunk${c}_sim_tgreedy --mode transducer_greedy --chunk-size $c --simulate-streaming")
    done
  fi
  for c in $chunks; do tasks+=("decode_test chunk${c}_sim --chunk-size $c --simulate-streaming"); done
  tasks+=("decode_test full")
  for c in $chunks; do tasks+=("decode_test chunk$c --chunk-size $c"); done
  in_parallel "${tasks[@]}"
fi

if run_stage 6; then
  resolve_rescore
  mkdir -p "$decode_dir"
  mapfile -t files < <(test_audio)
  log 6 "stream ${#files[@]} files of $test_part at chunk ${stream_chunks// /, }${lm_chunk:+ and with the word LM at chunk $lm_chunk} (no endpointing, 8 streams batched)"
  tasks=()  # the list's last (smallest) chunk first: smaller chunks stream slower
  for c in $stream_chunks; do tasks=("stream_test $c" "${tasks[@]}"); done
  if [ -n "$lm_chunk" ]; then tasks=("stream_test $lm_chunk lm" "${tasks[@]}"); fi
  if [ "$rescore" = true ] && [ -n "$rescore_chunk" ]; then
    tasks=("stream_test $rescore_chunk lm_rescore" "stream_test $rescore_chunk rescore" "${tasks[@]}")
  fi
  in_parallel "${tasks[@]}"
  log 6 "one file as a live stream (partials on stderr, final segments with word times)"
  wenet-lite stream --model "$model" --chunk-size "${stream_chunks%% *}" "${device_args[@]}" \
    --left-chunks "$left_chunks" "${files[0]}" 2> "$exp/stream_partials.txt" | tee "$exp/stream_one_file.txt"
fi

if run_stage 7; then
  resolve_rescore
  mapfile -t files < <(test_audio)
  out=$exp/export
  c=$export_chunk
  log 7 "export TorchScript (+int8) and ONNX (+int8): chunk $c, left $export_left"
  for q in "" int8; do
    wenet-lite export --model "$model" --format torchscript --chunk-size "$c" \
      --left-chunks "$export_left" ${q:+--int8} --out "$out/model${q:+.$q}.ts"
  done
  wenet-lite export --model "$model" --format onnx --chunk-size "$c" \
    --left-chunks "$export_left" --int8 --out "$out/onnx"
  log 7 "stream ${#files[@]} test files through the exported models, without wenet_lite"
  score() {  # score NAME: $out/NAME.txt ("PATH TEXT" lines) -> $decode_dir/NAME
    wenet-lite score --hyp "$out/$1.txt" --data "$data/$test_part" --out "$decode_dir/$1" \
      | grep -E "^(WER|CER)" | sed "s/^/$1: /"
  }
  exported() {  # exported ts|sherpa fp32|int8|rescore: stream the test files through a model
    local name=$1$c ts=$out/model.ts int8=()
    if [ "$2" = int8 ]; then name=${name}_int8 ts=$out/model.int8.ts int8=(--int8); fi
    if [ "$2" = rescore ]; then
      python3 examples/run_exported.py --names --rescore "$ts" "${files[@]}" > "$out/$1${c}_rescore.txt"
      score "$1${c}_rescore"
      return
    fi
    if [ "$1" = ts ]; then
      python3 examples/run_exported.py --names "$ts" "${files[@]}" > "$out/$name.txt"
    else
      python3 examples/run_sherpa.py --dir "$out/onnx" "${int8[@]}" "${files[@]}" > "$out/$name.txt"
    fi
    score "$name"
  }
  runs=("exported ts fp32" "exported sherpa fp32" "exported ts int8" "exported sherpa int8")
  if [ "$rescore" = true ]; then runs=("exported ts rescore" "${runs[@]}"); fi
  in_parallel "${runs[@]}"
  head -n 3 "$out/ts$c.txt" "$out/sherpa$c.txt"
fi

if run_stage 8; then
  resolve_rescore
  resolve_lm_text
  log 8 "plots and $exp/RESULTS.md"
  python3 recipes/common/plot_training.py --exp "$exp"
  python3 recipes/synthetic/local/plot_alignment.py --model "$model" --data "$data/$test_part" --index 0 \
    --out "$exp/alignment.png"
  python3 recipes/synthetic/local/plot_attention.py --model "$model" --data "$data/$test_part" --index 0 \
    --chunk-size 16 --left-chunks 2 --out "$exp/attention.png"
  if [ "$rescore" = true ]; then
    python3 recipes/synthetic/local/plot_cross_attention.py --model "$model" --data "$data/$test_part" --index 0 \
      --chunk-size "${rescore_chunk:-0}" --out "$exp/cross_attention.png"
  fi
  python3 recipes/common/results_table.py --exp "$exp" --model "$model" \
    --train-data "$data/train-clean-100" --test "$data/$test_part" ${lm_text:+--lm-text "$lm_text"} \
    $([ -f "$exp/hotwords/unseen.txt" ] && echo "--hotwords-list $exp/hotwords/unseen.txt") \
    $([ -f "$exp/punct/metrics.json" ] && echo "--punct $exp/punct") \
    --note "A demonstration on synthetic speech (espeak-ng and flite voices reading fortunes): it shows every stage working on a machine without data; it is not a model for real recordings." \
    --note "Corpus: $corpus ($hours h requested, seed $seed). Config: $config${overrides:+, overrides: $overrides}." \
    --note "Decoding and streaming use all left context; the exported models (TorchScript, ONNX in sherpa-onnx) run chunk $export_chunk with $export_left left chunks." \
    --note "Command: recipes/synthetic/run.sh$([ "$smoke" = 1 ] && echo ' (SMOKE=1)')"
fi
