#!/usr/bin/env python3
"""Generate a LibriSpeech-layout corpus of synthetic speech, offline, deterministically.

Usage:
    python recipes/synthetic/local/make_synthetic_librispeech.py --out data/synth --hours 1 \
        --seed 0 [--jobs 4]

Writes DIR/LibriSpeech/{train-clean-100,dev-clean,test-clean,test-other}/<spk>/<chapter>/ holding
<spk>-<chapter>-<utt>.flac (16 kHz mono, 16 bit) and <spk>-<chapter>.trans.txt ("ID TEXT",
upper case), the real corpus's layout, so one `prepare` reads both; plus LibriSpeech/
SYNTHETIC.json (hours, counts, voices, seed) and DIR/librispeech-lm-norm.txt.gz: the whole
train sentence pool, one upper-case transcript a line, as LibriSpeech's separate LM corpus
(openslr.org/11) is text beyond the spoken training transcripts. No dev or test sentence is in
it. `--lm-text-only` writes just that file (for a corpus generated before it existed).
Text: sentences from Debian's fortune cookies, kept only where the transcript is certain (no
digits, symbols, initials or acronyms), and disjoint across the three parts. Voices: espeak-ng
and flite at 100 settings of accent, variant, rate and pitch; one setting is one speaker.
test-other holds test-clean's sentences read by 20 held-out voices: espeak-ng voice variants
that no other part uses (so no training utterance has their timbre), in the same accents, so
test-clean against test-other measures how a model copes with voices it never heard.
`--parts test-other` adds it to a corpus generated before it existed.

Determinism: an utterance's text, voice and noise depend only on (seed, part, index), and a
part is the shortest prefix of that sequence reaching its target duration, so a seed gives
the same corpus whatever --jobs is.

Needs: apt-get install espeak-ng flite fortunes-min fortunes (fortunes-min alone also works,
with fewer sentences).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Deque, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import soundfile as sf
import soxr
from tqdm import tqdm

from wenet_lite.fileio import atomic_open, write_text_atomic

APT_HINT = "apt-get install espeak-ng flite fortunes-min fortunes"
FORTUNE_DIR = Path("/usr/share/games/fortunes")
SAMPLE_RATE = 16000
PARTS = ("train-clean-100", "dev-clean", "test-clean", "test-other")
HELD_OUT = "test-other"  # test-clean's sentences, voices no other part has
LM_TEXT = "librispeech-lm-norm.txt.gz"  # the name of LibriSpeech's LM corpus file
EVAL_SHARE = 0.05  # dev and test each add this fraction of the train hours ...
MAX_EVAL_HOURS = 0.25  # ... up to this much (~250 utterances, ~2,700 words): enough to score
MIN_EVAL_UTTS = 10
EVAL_SENTENCE_SHARE = 0.05  # of the sentence pool, for dev and for test each
MIN_EVAL_SENTENCES = 20
MIN_WORDS, MAX_WORDS = 3, 25
VOICE_TIMEOUT_S = 120  # one synthesiser call; past it the run fails, naming the utterance
UTTS_PER_CHAPTER = 50
FIRST_SPEAKER = 100
NOISE_DBFS = -70.0
# The voice table is fixed (not drawn from --seed) so a speaker id means one voice everywhere.
VOICE_TABLE_SEED = 20240601
ESPEAK_ACCENTS = ("en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp")
ESPEAK_ACCENTS += ("en-gb-x-gbcwmd", "en-029", "en-us-nyc")
ESPEAK_VARIANTS = tuple(f"m{i}" for i in range(1, 9)) + tuple(f"f{i}" for i in range(1, 6))
ESPEAK_VARIANTS += ("klatt", "klatt2", "klatt3", "klatt4", "klatt5", "klatt6")
ESPEAK_VOICES = 80
# flite voice -> range of int_f0_target_mean in Hz; None where the voice ignores it (rms).
FLITE_F0: Dict[str, Optional[Tuple[float, float]]] = {
    "kal": (80.0, 130.0),
    "kal16": (80.0, 130.0),
    "awb": (85.0, 140.0),
    "rms": None,
    "slt": (145.0, 220.0),
}
FLITE_SETTINGS_PER_VOICE = 4
# espeak-ng variants of the held-out voices: none is in ESPEAK_VARIANTS.
HELD_OUT_VARIANTS = ("Alex", "Andy", "Annie", "belinda", "benjamin")
HELD_OUT_VARIANTS += ("edward", "john", "linda", "paul", "steph")
HELD_OUT_VOICES = 20
FIRST_HELD_OUT_SPEAKER = 900

_ALLOWED = re.compile(r"[A-Za-z ,.;:!?'\"()-]+")
_EXPAND = ((re.compile(r"\bMr\."), "Mister"), (re.compile(r"\bMrs\."), "Missus"))
_EXPAND += ((re.compile(r"\bDr\."), "Doctor"), (re.compile(r"\s&\s"), " and "))
_SENTENCE = re.compile(r"[^.!?]*[.!?]+[\"')]*|[^.!?]+$")
# A sentence ending in one of these was cut at an abbreviation, whose reading is a guess.
_ABBREVIATIONS = set("st jr sr vs etc ie eg co inc ltd no mt ft gen col capt prof rev gov".split())
_ABBREVIATIONS |= set("sen rep hon wm esq jan feb mar apr jun jul aug sep sept oct nov dec".split())


@dataclass(frozen=True)
class Voice:
    speaker: int
    engine: str  # "espeak-ng" or "flite"
    name: str  # espeak-ng "accent+variant", flite voice name
    rate: float  # espeak-ng words per minute; flite duration_stretch (> 1 is slower)
    pitch: Optional[float]  # espeak-ng -p (0-99); flite int_f0_target_mean in Hz
    peak_db: float  # peak level of this speaker's utterances, dBFS

    def command(self, text_file: Path, wav: Path) -> List[str]:
        if self.engine == "espeak-ng":
            return ["espeak-ng", "-v", self.name, "-s", str(int(self.rate)), "-p",
                    str(int(self.pitch)), "-w", str(wav), "-f", str(text_file)]  # fmt: skip
        cmd = ["flite", "-voice", self.name, "--setf", f"duration_stretch={self.rate}"]
        if self.pitch is not None:
            cmd += ["--setf", f"int_f0_target_mean={self.pitch}"]
        return cmd + ["-f", str(text_file), "-o", str(wav)]


@dataclass(frozen=True)
class Utterance:
    uid: str  # <speaker>-<chapter>-<utt:04d>
    voice: Voice
    text: str  # what the synthesiser reads: original case and punctuation
    transcript: str  # LibriSpeech style: A-Z, apostrophe, single spaces
    seed: int  # drives trimming margin, level jitter and noise


def build_voices() -> List[Voice]:
    """The fixed table of voice settings: 80 espeak-ng and 20 flite speakers."""
    rng = np.random.default_rng(VOICE_TABLE_SEED)
    voices = _espeak_voices(rng, ESPEAK_VARIANTS, ESPEAK_VOICES, FIRST_SPEAKER)
    for name, f0 in FLITE_F0.items():
        for _ in range(FLITE_SETTINGS_PER_VOICE):
            stretch = round(rng.uniform(0.85, 1.2), 2)
            pitch = None if f0 is None else round(rng.uniform(*f0))
            peak = round(rng.uniform(-6, -1), 1)
            spk = FIRST_SPEAKER + len(voices)
            voices.append(Voice(spk, "flite", name, stretch, pitch, peak))
    return voices


def build_held_out_voices() -> List[Voice]:
    """HELD_OUT's speakers: HELD_OUT_VARIANTS in the training accents, rates and pitches."""
    rng = np.random.default_rng(VOICE_TABLE_SEED + 1)
    return _espeak_voices(rng, HELD_OUT_VARIANTS, HELD_OUT_VOICES, FIRST_HELD_OUT_SPEAKER)


def _espeak_voices(
    rng: np.random.Generator, variants: Tuple[str, ...], count: int, first: int
) -> List[Voice]:
    """``count`` espeak-ng speakers numbered from ``first``: accent and variant pairs drawn
    without repeats, each with its rate, pitch and level."""
    combos = [(a, v) for a in ESPEAK_ACCENTS for v in variants]
    voices: List[Voice] = []
    for i in sorted(rng.choice(len(combos), count, replace=False)):
        accent, variant = combos[i]
        rate, pitch = round(rng.uniform(140, 195)), round(rng.uniform(30, 70))
        peak = round(rng.uniform(-6, -1), 1)
        spk = first + len(voices)
        voices.append(Voice(spk, "espeak-ng", f"{accent}+{variant}", rate, pitch, peak))
    return voices


def clean_sentence(raw: str) -> Optional[Tuple[str, str]]:
    """(text to speak, transcript) for one sentence, or None where the reading is uncertain."""
    raw = " ".join(raw.split())
    if not raw or not _ALLOWED.fullmatch(raw):
        return None  # digits, symbols, control characters (fortunes overstrike with \b)
    text = raw.replace("--", ", ").replace('"', "").replace("(", ", ").replace(")", ", ")
    text = re.sub(r"\s+([,.;:!?])", r"\1", " ".join(text.split()))
    text = re.sub(r"^[^A-Za-z]+", "", text)
    text = re.sub(r",+", ",", text)
    words = [w.strip("'") for w in re.split(r"[^A-Za-z']+", text)]
    words = [w for w in words if w]
    if not MIN_WORDS <= len(words) <= MAX_WORDS or words[-1].lower() in _ABBREVIATIONS:
        return None
    for w in words:
        if len(w) == 1 and w not in ("a", "A", "I"):
            return None  # initials and letter names are read as letters, not words
        if len(w) > 1 and w.replace("'", "").isupper():
            return None  # acronyms, roman numerals and shouting: spelt or read, unknown
    return text, " ".join(w.upper() for w in words)


def fortune_files(text_dir: Path) -> List[Path]:
    """The text files of a fortune directory, without strfile's .dat indexes and .u8 links."""
    if not text_dir.is_dir():
        return []
    return sorted(p for p in text_dir.iterdir() if p.is_file() and p.suffix not in (".dat", ".u8"))


def load_sentences(text_dir: Path) -> List[Tuple[str, str]]:
    """Deduplicated (text, transcript) pairs from every fortune file, sorted by transcript."""
    by_transcript: Dict[str, str] = {}
    for path in fortune_files(text_dir):
        body = path.read_bytes().decode("utf-8", errors="replace")
        for entry in re.split(r"^%$", body, flags=re.MULTILINE):
            # "-- Author, Source" attribution lines are not part of the quote.
            lines = [ln for ln in entry.splitlines() if not ln.strip().startswith("--")]
            joined = " ".join(lines)
            for pattern, repl in _EXPAND:
                joined = pattern.sub(repl, joined)
            for raw in _SENTENCE.findall(joined):
                pair = clean_sentence(raw)
                if pair is not None:
                    by_transcript.setdefault(pair[1], pair[0])
    return [(by_transcript[t], t) for t in sorted(by_transcript)]


def split_sentences(sentences: List[Tuple[str, str]], seed: int) -> List[List[Tuple[str, str]]]:
    """Disjoint sentence pools for PARTS, in order: train, dev, test (test-other reads test's)."""
    n_eval = max(MIN_EVAL_SENTENCES, round(EVAL_SENTENCE_SHARE * len(sentences)))
    if len(sentences) < 4 * n_eval:
        raise SystemExit(f"error: only {len(sentences)} usable sentences; install: {APT_HINT}")
    order = np.random.default_rng([seed, 7]).permutation(len(sentences))
    picks = [order[2 * n_eval :], order[:n_eval], order[n_eval : 2 * n_eval]]
    picks.append(picks[2])
    return [[sentences[i] for i in sorted(p)] for p in picks]


def plan(
    part_index: int, sentences: List[Tuple[str, str]], voices: List[Voice], seed: int
) -> Iterator[Utterance]:
    """The endless utterance sequence of one part; a part is a prefix of it.

    Each round gives every voice one utterance in a shuffled order, so speakers stay balanced
    and a speaker's r-th utterance (r = round) lands in its chapter r // UTTS_PER_CHAPTER.
    Sentences come as a fresh shuffle of the pool each cycle, so repeats are spread out.
    """
    k = 0
    while True:
        rnd, pos = divmod(k, len(voices))
        if pos == 0:
            voice_order = _shuffle(len(voices), seed, part_index, rnd, 0)
        cycle, spos = divmod(k, len(sentences))
        if spos == 0:
            text_order = _shuffle(len(sentences), seed, part_index, cycle, 1)
        voice = voices[voice_order[pos]]
        chapter = (part_index + 1) * 1000 + rnd // UTTS_PER_CHAPTER
        uid = f"{voice.speaker}-{chapter}-{rnd % UTTS_PER_CHAPTER:04d}"
        text, transcript = sentences[text_order[spos]]
        utt_seed = int(np.random.SeedSequence([seed, part_index, k, 2]).generate_state(1)[0])
        yield Utterance(uid, voice, text, transcript, utt_seed)
        k += 1


def _shuffle(n: int, *key: int) -> np.ndarray:
    return np.random.default_rng(list(key)).permutation(n)


def synthesize(utt: Utterance) -> np.ndarray:
    """Speak one utterance; returns int16 samples at SAMPLE_RATE."""
    with tempfile.TemporaryDirectory(prefix="synth-") as tmp:
        text_file, wav = Path(tmp) / "text.txt", Path(tmp) / "out.wav"
        text_file.write_text(utt.text + "\n")
        try:
            proc = subprocess.run(
                utt.voice.command(text_file, wav),
                capture_output=True,
                text=True,
                timeout=VOICE_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"{utt.voice.engine} voice {utt.voice.name} did not finish {utt.uid} "
                f"({utt.text!r}) in {VOICE_TIMEOUT_S} s"
            ) from None
        if proc.returncode != 0 or not wav.exists():
            raise RuntimeError(
                f"{utt.voice.engine} voice {utt.voice.name} failed on {utt.text!r} "
                f"(exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
            )
        audio, rate = sf.read(str(wav), dtype="float64", always_2d=True)
    audio = audio.mean(axis=1)
    if rate != SAMPLE_RATE:  # espeak-ng writes 22,050 Hz, flite's kal 8 kHz
        audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ")
    return postprocess(audio, utt.voice.peak_db, np.random.default_rng(utt.seed), utt.uid)


def postprocess(
    audio: np.ndarray, peak_db: float, rng: np.random.Generator, uid: str
) -> np.ndarray:
    """Trim long edge silence, set the peak level, add a faint noise floor; int16 out."""
    level = np.abs(audio)
    loud = np.flatnonzero(level > level.max() * 10 ** (-40 / 20))
    if loud.size == 0:
        raise RuntimeError(f"synthesiser produced silence for {uid}")
    margin = int(rng.uniform(0.15, 0.35) * SAMPLE_RATE)
    audio = audio[max(0, loud[0] - margin) : loud[-1] + 1 + margin]
    gain = 10 ** ((peak_db + rng.uniform(-1.0, 1.0)) / 20) / level.max()
    # flite leaves exact digital zeros in pauses; log-fbank of zeros is extreme, so add a
    # deterministic floor at NOISE_DBFS (about 10 LSB at 16 bit).
    noise = rng.normal(0.0, 10 ** (NOISE_DBFS / 20), audio.shape)
    return np.clip(np.round((audio * gain + noise) * 32767), -32768, 32767).astype(np.int16)


def make_part(
    root: Path,
    part_index: int,
    target_s: float,
    min_utts: int,
    utts: Iterator[Utterance],
    pool: Optional[ProcessPoolExecutor],
    jobs: int = 1,
) -> Dict[str, object]:
    """Synthesise the shortest prefix of `utts` reaching target_s and min_utts; write it.

    The part is written into root/<part>.partial and renamed to root/<part> once whole, so an
    interrupted run never leaves a part that looks complete.
    """
    staging = root / f"{PARTS[part_index]}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    rows: Dict[Tuple[str, str], List[str]] = {}  # (speaker, chapter) -> transcript lines
    total_s, count, mean_s = 0.0, 0, 3.0
    bar = tqdm(total=round(target_s), unit="s", desc=PARTS[part_index], file=sys.stderr)
    while total_s < target_s or count < min_utts:
        want = max((target_s - total_s) / mean_s * 1.1, min_utts - count) + 4
        batch = list(islice(utts, min(int(want), 1000)))
        audios = in_order(pool, jobs, batch) if pool else map(synthesize, batch)
        for utt, audio in zip(batch, audios):
            speaker, chapter, _ = utt.uid.split("-")
            folder = staging / speaker / chapter
            folder.mkdir(parents=True, exist_ok=True)
            sf.write(str(folder / f"{utt.uid}.flac"), audio, SAMPLE_RATE, "PCM_16", format="FLAC")
            rows.setdefault((speaker, chapter), []).append(f"{utt.uid} {utt.transcript}")
            total_s, count = total_s + len(audio) / SAMPLE_RATE, count + 1
            bar.update(round(total_s) - bar.n)
            if total_s >= target_s and count >= min_utts:
                break
        mean_s = total_s / count
    bar.close()
    for (speaker, chapter), lines in rows.items():
        trans = staging / speaker / chapter / f"{speaker}-{chapter}.trans.txt"
        trans.write_text("\n".join(sorted(lines)) + "\n")
    staging.rename(root / PARTS[part_index])
    return {
        "utterances": count,
        "hours": round(total_s / 3600, 4),
        "speakers": len({s for s, _ in rows}),
        "chapters": len(rows),
    }


def in_order(
    pool: ProcessPoolExecutor, jobs: int, batch: Iterable[Utterance]
) -> Iterator[np.ndarray]:
    """Synthesise `batch` on `pool` (`jobs` workers), yielding audio in order, 2 x jobs ahead.

    Only a small window is ever submitted, and whatever is still queued when the consumer stops
    early (or fails) is cancelled, so shutting the pool down never waits on pending work.
    """
    window: Deque[Future] = deque()
    ahead = 2 * jobs
    todo = iter(batch)
    try:
        while True:
            while len(window) < ahead:
                utt = next(todo, None)
                if utt is None:
                    break
                window.append(pool.submit(synthesize, utt))
            if not window:
                return
            yield window.popleft().result(timeout=VOICE_TIMEOUT_S * 2)
    finally:
        for future in window:
            future.cancel()


def write_lm_text(out: Path, train_pool: List[Tuple[str, str]]) -> Path:
    """DIR/librispeech-lm-norm.txt.gz: every train-pool transcript, sorted; written atomically."""
    path = out / LM_TEXT
    with atomic_open(path, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
        f.writelines(f"{transcript}\n" for _, transcript in train_pool)
    return path


def check_requirements(text_dir: Path) -> None:
    """Exit with the apt command to run when a synthesiser, a flite voice or the text is missing."""
    missing = [tool for tool in ("espeak-ng", "flite") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"error: {' and '.join(missing)} not found on PATH; install: {APT_HINT}")
    listed = subprocess.run(["flite", "-lv"], capture_output=True, text=True).stdout.split()
    absent = [name for name in FLITE_F0 if name not in listed]
    if absent:
        raise SystemExit(f"error: flite lacks voice(s) {', '.join(absent)}; install: {APT_HINT}")
    if not fortune_files(text_dir):
        raise SystemExit(f"error: no fortune files in {text_dir}; install: {APT_HINT}")


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="writes DIR/LibriSpeech")
    p.add_argument(
        "--hours",
        type=float,
        metavar="H",
        help="target hours of train-clean-100; dev-clean and test-clean are in addition, "
        f"each {EVAL_SHARE * 100:g}%% of it (at most {MAX_EVAL_HOURS:g} h, see --eval-hours) "
        f"and at least {MIN_EVAL_UTTS} utterances",
    )
    p.add_argument(
        "--eval-hours",
        type=float,
        metavar="H",
        help=f"target hours of dev-clean and of test-clean each (default: {EVAL_SHARE:g} x "
        f"--hours, at most {MAX_EVAL_HOURS:g})",
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="same seed, same corpus (0)")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count(),
        metavar="N",
        help="parallel synthesisers (CPU count)",
    )
    p.add_argument("--text-dir", type=Path, default=FORTUNE_DIR, help="fortune files to read")
    p.add_argument(
        "--parts",
        default=",".join(PARTS),
        metavar="P,P",
        help="the parts to write (all); parts missing from a corpus generated before, e.g. "
        f"--parts {HELD_OUT}, are added to it with the seed it was made with",
    )
    p.add_argument(
        "--lm-text-only",
        action="store_true",
        help=f"write only DIR/{LM_TEXT} (the train sentence pool of this --seed) and exit",
    )
    args = p.parse_args(argv)
    if args.lm_text_only:
        return args
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown or not args.parts:
        p.error(f"--parts {','.join(unknown) or '(none)'}: choose from {', '.join(PARTS)}")
    summary = args.out / "LibriSpeech" / "SYNTHETIC.json"
    adding = PARTS[0] not in args.parts and summary.is_file()
    if args.hours is None and not adding:
        p.error("--hours is required (unless --lm-text-only, or --parts adds to a corpus)")
    if adding and args.hours is None:  # the corpus's own train and eval hours
        earlier = json.loads(summary.read_text())
        args.hours = earlier["hours_requested_train"]
        if args.eval_hours is None:
            args.eval_hours = earlier["hours_requested_eval"]
    if args.hours <= 0 or args.jobs < 1:
        p.error(f"--hours ({args.hours}) must be > 0 and --jobs ({args.jobs}) >= 1")
    if args.eval_hours is None:
        args.eval_hours = min(EVAL_SHARE * args.hours, MAX_EVAL_HOURS)
    elif args.eval_hours <= 0:
        p.error(f"--eval-hours ({args.eval_hours}) must be > 0")
    return args


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    if args.lm_text_only:
        if not fortune_files(args.text_dir):
            raise SystemExit(f"error: no fortune files in {args.text_dir}; install: {APT_HINT}")
        pools = split_sentences(load_sentences(args.text_dir), args.seed)
        print(f"{write_lm_text(args.out, pools[0])}: {len(pools[0])} sentences")
        return
    check_requirements(args.text_dir)
    root = args.out / "LibriSpeech"
    for part in args.parts:
        if (root / part).exists():
            raise SystemExit(f"error: {root / part} exists; remove it or choose another --out")
    summary_file = root / "SYNTHETIC.json"
    earlier = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    if earlier is not None and earlier.get("seed") != args.seed:
        raise SystemExit(
            f"error: {summary_file} was made with --seed {earlier.get('seed')}; adding parts "
            f"to it needs the same seed (not {args.seed})"
        )
    sentences = load_sentences(args.text_dir)
    pools = split_sentences(sentences, args.seed)
    write_lm_text(args.out, pools[0])
    voices, held_out = build_voices(), build_held_out_voices()
    targets = [args.hours * 3600] + [args.eval_hours * 3600] * 3
    summary: Dict[str, object] = earlier or {
        "generator": "recipes/synthetic/local/make_synthetic_librispeech.py",
        "seed": args.seed,
        "hours_requested_train": args.hours,
        "hours_requested_eval": args.eval_hours,
        "text_source": str(args.text_dir),
        "usable_sentences": len(sentences),
        "lm_text": {"file": f"../{LM_TEXT}", "sentences": len(pools[0])},
        "parts": {},
    }
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 else None
    try:
        for i, part in enumerate(PARTS):
            if part not in args.parts:
                continue
            utts = plan(i, pools[i], held_out if part == HELD_OUT else voices, args.seed)
            min_utts = 1 if i == 0 else MIN_EVAL_UTTS
            stats = make_part(root, i, targets[i], min_utts, utts, pool, args.jobs)
            summary["parts"][part] = {"sentences": len(pools[i]), **stats}
    finally:
        if pool is not None:
            # nothing is queued past the window, and that is cancelled: this returns once the
            # (at most `jobs`) running calls finish, each bounded by VOICE_TIMEOUT_S
            pool.shutdown(wait=True, cancel_futures=True)
    summary["voices"] = [asdict(v) for v in voices]
    summary["held_out_voices"] = [asdict(v) for v in held_out]
    # written last, atomically: the recipe takes its presence to mean a complete corpus
    write_text_atomic(summary_file, json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["parts"], indent=1))


if __name__ == "__main__":
    main()
