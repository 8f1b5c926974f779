"""`wenet-lite score`: WER/CER of transcripts from anywhere against a prepared test set.

Transcripts come as

- ``id text`` lines (``hyp.txt`` of `decode`, or any recogniser's output),
- ``PATH text`` lines (``examples/run_exported.py --names``, ``examples/run_sherpa.py``): a path
  counts as the utterance whose audio file it is (else as its name without extensions),
- the JSON lines of `wenet-lite stream --json`: the final segments of each input are joined in
  segment order, ``error`` lines count as failed utterances, and the closing ``summary`` line
  gives the streaming settings.

Writes ``hyp.txt``, ``details.txt`` (per utterance: aligned ref/hyp/op rows), ``summary.txt``
(WER and CER lines as `decode` writes them) and ``summary.json`` (the same numbers, the
settings, and with ``compare`` how many transcripts equal another run's ``hyp.txt``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from wenet_lite.evaluation.wer import (
    format_details,
    format_summary,
    score_utterance,
    summary_record,
)
from wenet_lite.fileio import naming_text_errors, write_files_atomic

__all__ = [
    "References", "Transcripts", "read_transcripts", "read_hyps", "hyp_lines",
    "score_transcripts",
]  # fmt: skip

Pathlike = Union[str, Path]


class References:
    """A prepared set's normalised transcripts by utterance id, and the utterance of each audio
    file that a cut spans whole (what `stream --ref` streams)."""

    def __init__(self, data: Pathlike) -> None:
        from wenet_lite.data.manifest import cut_text, load_cuts
        from wenet_lite.data.tokenizer import normalize_text

        self.texts: Dict[str, str] = {}
        self.audio: Dict[str, str] = {}
        """absolute audio path -> utterance id"""
        for cut in load_cuts(data):
            self.texts[cut.id] = normalize_text(cut_text(cut))
            if not cut.has_recording or len(cut.recording.sources) != 1:
                continue
            source = cut.recording.sources[0]
            whole = cut.start == 0 and cut.duration >= cut.recording.duration - 1e-3
            if source.type == "file" and whole:
                self.audio[str(Path(source.source).resolve())] = cut.id

    def utterance(self, name: str) -> str:
        """The utterance of an audio path (else of a name: itself, or its stem)."""
        return _utterance(name, self.audio)


@dataclass
class Transcripts:
    texts: Dict[str, str]
    """utterance id -> transcript"""
    failed: List[str] = field(default_factory=list)
    """utterances (or inputs) that could not be decoded"""
    settings: Optional[Dict[str, Any]] = None
    """how they were made, when the source says (`stream --json`'s summary line)"""


def read_hyps(path: Pathlike) -> Dict[str, str]:
    """``id text`` lines: {id: text} (text with single spaces; an id alone is an empty text)."""
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f, naming_text_errors(path):
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            key, _, text = line.strip().partition(" ")
            if key in out:
                raise ValueError(f"{path}:{number}: {key} appears twice")
            out[key] = " ".join(text.split())
    return out


def hyp_lines(texts: Dict[str, str]) -> str:
    """``id text`` lines in the given order (what ``hyp.txt`` holds)."""
    return "".join(f"{key} {text}".rstrip() + "\n" for key, text in texts.items())


def read_transcripts(path: Pathlike, audio_ids: Dict[str, str]) -> Transcripts:
    """Transcripts of a file in any of the module's formats.

    ``audio_ids`` maps audio file paths (absolute) to utterance ids, to name a ``PATH text``
    line or a streamed input by its utterance.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"transcript file not found: {path}")
    with open(path, encoding="utf-8") as f, naming_text_errors(path):
        first = f.readline().lstrip()
    if first.startswith("{"):
        return _read_stream_json(path, audio_ids)
    return Transcripts({_utterance(key, audio_ids): text for key, text in read_hyps(path).items()})


def _utterance(name: str, audio_ids: Dict[str, str]) -> str:
    """The utterance of a key: an id as it is, an audio path by the manifest, else its stem."""
    if "/" not in name and "." not in name:
        return name
    found = audio_ids.get(str(Path(name).resolve()))
    return found if found is not None else Path(name).name.split(".")[0]


def _read_stream_json(path: Path, audio_ids: Dict[str, str]) -> Transcripts:
    segments: Dict[str, List[Tuple[int, str]]] = {}
    failed: List[str] = []
    settings = None
    with open(path, encoding="utf-8") as f, naming_text_errors(path):
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                kind = obj["type"]
                if kind == "final":
                    uid = _utterance(obj["file"], audio_ids)
                    segments.setdefault(uid, []).append((int(obj["segment"]), obj["text"]))
                elif kind == "error":
                    failed.append(_utterance(obj["file"], audio_ids))
                elif kind == "summary":
                    settings = obj
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ValueError(
                    f"{path}:{number}: not a JSON line of `wenet-lite stream` ({e})"
                ) from None
    texts = {
        uid: " ".join(text for _, text in sorted(parts) if text) for uid, parts in segments.items()
    }
    return Transcripts(texts, failed, settings)


def score_transcripts(
    transcripts: Transcripts,
    refs: Dict[str, str],
    out_dir: Pathlike,
    inputs: Dict[str, str],
    compare: Optional[Pathlike] = None,
) -> Dict[str, Any]:
    """Score against ``refs`` (normalised references by utterance id) and write the four files
    to ``out_dir``; ``inputs`` (where the transcripts and references came from) head the
    summaries. Returns the ``summary.json`` record."""
    unknown = sorted(set(transcripts.texts) - set(refs))
    if unknown:
        raise ValueError(
            f"{len(unknown)} transcript(s) of utterances not in the references: {unknown[:3]}"
        )
    hyps = dict(sorted(transcripts.texts.items()))
    scores = [score_utterance(u, refs[u], text) for u, text in hyps.items()]
    record: Dict[str, Any] = {**inputs, "command": "score"}
    if transcripts.settings is not None:
        record["settings"] = transcripts.settings
    record.update(summary_record(scores))
    record["failed"] = len(transcripts.failed)
    record["missing"] = len(set(refs) - set(hyps) - set(transcripts.failed))
    lines = [f"{key} {value}" for key, value in inputs.items()]
    lines += [*format_summary(scores), f"failed {record['failed']}"]
    if compare is not None:
        other = read_hyps(Path(compare) / "hyp.txt")
        common = sorted(set(hyps) & set(other))
        differ = [u for u in common if hyps[u] != other[u]]
        other_file, same = str(Path(compare) / "hyp.txt"), len(common) - len(differ)
        record["identical"] = {
            "to": other_file,
            "same": same,
            "compared": len(common),
            "differ": differ[:20],
        }
        lines.append(f"identical to {other_file}: {same}/{len(common)}")
    write_files_atomic(out_dir, {  # all or none
        "hyp.txt": hyp_lines(hyps),
        "details.txt": "".join("\n".join(format_details(s)) + "\n\n" for s in scores),
        "summary.txt": "\n".join(lines) + "\n",
        "summary.json": json.dumps(record, indent=1) + "\n",
    })  # fmt: skip
    return record
