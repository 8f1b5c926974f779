#!/usr/bin/env bash
# The heads of one encoder side by side at equal training time, on the synthetic corpus:
# CTC alone, CTC with SpecAugment (CR-CTC's masks, the fair baseline for it), CR-CTC from
# scratch (and with half the batch, cr-ctc-half: its two views of half the utterances cost a
# CTC step, so it takes as many steps as CTC) and from CTC (the curriculum: CTC for
# --ctc-share of the time, half by default, then the consistency loss and SpecAugment added by
# `train --init` for the rest), the hybrid from scratch and from CTC (the transducer head
# added the same way) and the hybrid with CR-CTC.
# Each is trained by recipes/synthetic/run.sh's stages 3-5 for the steps that take the time
# CTC's take (the config's train.max_steps, 3000 in the recipe; the heads' step speeds
# measured by benchmarks/bench_train.py, docs/heads.md), then decoded on test-clean and
# on test-other (the same sentences read by voices training never hears; full context and
# simulated streaming at chunk 16) and tabled by recipes/common/heads_table.py into
# $out/HEADS<tag>.md (a run with --tag keeps a table of its own). --decode-only decodes and
# tables runs trained before; --dry-run prints each run's steps and training command and runs
# nothing.
#
#   recipes/synthetic/compare_heads.sh
#       [--heads "ctc ctc-specaug cr-ctc cr-ctc-ctc cr-ctc-late hybrid hybrid-ctc hybrid-cr-ctc"]
#       [--scale 1.0]
#       [--extra "transducer.warmup_steps=300"] [--tag _w300] [--decode-only true]
#       [--blank-penalty 1.0] [--ctc-share 0.5] [--dry-run true]
#
# Run from the repository root after recipes/synthetic/run.sh --stop-stage 2 (the corpus,
# manifests, CMVN and stored fbank in data/synthetic). --scale multiplies every run's steps
# (twice the recipe's budget: --scale 2); --extra adds settings to every run, --tag to the
# runs' names (exp/heads/<head><tag>); a curriculum's first part takes --extra too (its
# SpecAugment, say). The attention decoder is left out of every run, so that
# "CTC" is CTC alone; CR-CTC needs SpecAugment, so its runs and ctc-specaug switch it on from
# the first step (cr-ctc-late: CTC + SpecAugment for --ctc-share of the time, then the second
# view and the consistency loss from model.cr_start_step in the same run, one learning-rate
# schedule; cr-ctc-ctc restarts it by train --init). Each model's greedy searches are decoded again with --blank-penalty (1.0):
# the table gives every WER's share of deletions, with and without it.
set -euo pipefail

heads=${heads:-"ctc ctc-specaug cr-ctc cr-ctc-ctc hybrid hybrid-ctc hybrid-cr-ctc"}
scale=${scale:-1.0}
data=${data:-data/synthetic}
out=${out:-exp/heads}
config=${config:-conf/synthetic_small.yaml}
extra_all=${extra_all:-}
tag=${tag:-}
decode_only=${decode_only:-false}
blank_penalty=${blank_penalty:-1.0}
ctc_share=${ctc_share:-0.5}
dry_run=${dry_run:-false}
while [ $# -gt 0 ]; do
  case "$1" in
    --heads) heads=$2 ;;
    --extra) extra_all=$2 ;;
    --tag) tag=$2 ;;
    --scale) scale=$2 ;;
    --data) data=$2 ;;
    --out) out=$2 ;;
    --config) config=$2 ;;
    --decode-only) decode_only=$2 ;;
    --blank-penalty) blank_penalty=$2 ;;
    --ctc-share) ctc_share=$2 ;;
    --dry-run) dry_run=$2 ;;
    *) echo "$0: unknown option $1 (--heads, --scale, --extra, --tag, --data, --out, --config, --decode-only, --blank-penalty, --ctc-share, --dry-run)" >&2
       exit 2 ;;
  esac
  shift 2
done
for flag in decode-only:"$decode_only" dry-run:"$dry_run"; do
  case ${flag#*:} in true | false) ;; *)
    echo "$0: --${flag%%:*} ${flag#*:}: give true or false" >&2; exit 2 ;; esac
done
between() {  # between VALUE LOW HIGH: LOW < VALUE < HIGH, as numbers (nan and words fail)
  python3 -c "import sys; low, v, high = (float(a) for a in sys.argv[1:])
sys.exit(not low < v < high)" "$2" "$1" "$3" 2>/dev/null
}
if ! between "$ctc_share" 0 1; then
  echo "$0: --ctc-share $ctc_share: give the first part's share of the time, between 0 and 1" >&2
  exit 2
fi
if ! between "$scale" 0 inf; then
  echo "$0: --scale $scale: give a positive number" >&2
  exit 2
fi

budget=$(python3 -c "import sys; from wenet_lite.config import load_config
try: c = load_config(sys.argv[1])
except (OSError, ValueError) as e: sys.exit(f'compare_heads.sh: --config: {e}')
print(c.train.max_steps, c.data.max_batch_seconds / 2)" "$config")
read -r base_steps half_batch <<< "$budget"  # CTC's steps; the half batch of cr-ctc-half
steps_of() { python3 -c "print(int(round($base_steps * $1 * $scale)))"; }
specaug="specaug.enabled=true specaug.start_step=0"
for head in $heads; do
  curriculum=()
  case $head in
    ctc) steps=$(steps_of 1.0); extra="" ;;
    ctc-specaug) steps=$(steps_of 1.0); extra="$specaug" ;;
    cr-ctc) steps=$(steps_of 0.51); extra="$specaug model.cr_ctc_weight=0.2" ;;
    cr-ctc-half) steps=$(steps_of 1.0)
      extra="$specaug model.cr_ctc_weight=0.2 data.max_batch_seconds=$half_batch" ;;
    hybrid) steps=$(steps_of 0.71); extra="model.transducer_weight=0.75" ;;
    cr-ctc-ctc | hybrid-ctc)  # CTC for --ctc-share of the time, then the head (run.sh's curriculum)
      if [ "$head" = cr-ctc-ctc ]; then speed=0.51; else speed=0.71; fi
      first=$(steps_of "$ctc_share"); rest=$(steps_of "(1 - $ctc_share) * $speed")
      steps=$((first + rest)); extra=""
      curriculum=(--heads "${head%-ctc}" --ctc-share "$(python3 -c "print($first / $steps)")") ;;
    cr-ctc-late)  # CTC + SpecAugment for --ctc-share of the time, then CR-CTC in the same run
      first=$(steps_of "$ctc_share"); rest=$(steps_of "(1 - $ctc_share) * 0.51")
      steps=$((first + rest))
      extra="$specaug model.cr_ctc_weight=0.2 model.cr_start_step=$first model.cr_warmup_steps=500" ;;
    hybrid-cr-ctc) steps=$(steps_of 0.40)
      extra="$specaug model.transducer_weight=0.75 model.cr_ctc_weight=0.2" ;;
    *) echo "$0: unknown head $head (ctc, ctc-specaug, cr-ctc, cr-ctc-half, cr-ctc-ctc, cr-ctc-late, hybrid, hybrid-ctc, hybrid-cr-ctc)" >&2
       exit 2 ;;
  esac
  extra="$extra $extra_all"
  common=(--data "$data" --exp "$out/$head$tag" --config "$config" --hotwords false
          --rescore false --punct false --chunks 16 --lm-chunk "")
  train=(bash recipes/synthetic/run.sh --stage 3 --stop-stage 5 "${common[@]}" "${curriculum[@]}"
         --overrides "decoder.type=none train.max_steps=$steps $extra")
  if [ "$dry_run" = true ]; then
    echo "[$head$tag] $steps steps: $(printf '%q ' "${train[@]}")"
    continue
  fi
  if [ "$decode_only" != true ]; then
    echo "$(date '+%H:%M:%S') [$head$tag] $steps steps${extra:+, $extra}"
    "${train[@]}"
  fi
  tests=(test-clean)
  for test in test-other; do
    if [ -f "$data/$test/cuts.jsonl.gz" ]; then
      tests+=("$test")
    else
      echo "$0: $data/$test is not prepared; add it with make_synthetic_librispeech.py --parts $test and prepare --parts $test (docs/heads.md)" >&2
    fi
  done
  for test in "${tests[@]}"; do
    if [ "$decode_only" = true ] || [ "$test" != test-clean ]; then
      echo "$(date '+%H:%M:%S') [$head$tag] decode $test"
      bash recipes/synthetic/run.sh --stage 5 --stop-stage 5 "${common[@]}" --test-part "$test"
    fi
    # greedy searches again with the blank logit lowered: the deletions it trades away
    decoded=$out/$head$tag/decode/$test
    wenet-lite decode --model "$out/$head$tag/avg_5.pt" --data "$data/$test" \
      --out "$decoded/full_bp" --blank-penalty "$blank_penalty"
    if [[ $head == hybrid* ]]; then
      wenet-lite decode --model "$out/$head$tag/avg_5.pt" --data "$data/$test" \
        --out "$decoded/full_tgreedy_bp" --mode transducer_greedy --blank-penalty "$blank_penalty"
    fi
  done
done
if [ "$dry_run" = true ]; then exit 0; fi
python3 recipes/common/heads_table.py --data "$data" --out "$out/HEADS$tag.md" \
  $(for test in "${tests[@]}"; do echo "--test $test"; done) \
  $(for head in $heads; do echo "--exp $head$tag=$out/$head$tag"; done) \
  --note "Command: recipes/synthetic/compare_heads.sh --scale $scale${extra_all:+ --extra \"$extra_all\"} (config $config)."
