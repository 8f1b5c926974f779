"""Search options: one frozen object that `decode`, `stream`, ``StreamingRecognizer`` and
``decode_model`` take, and from which the CLI declares its search flags.

A field's ``metadata`` holds its command-line flag and help; ``wenet_lite.cli`` builds the
flags from the fields, so a new option is one field here plus the code that uses it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, Optional

from wenet_lite.config import DecodeConfig, flag
from wenet_lite.config.fields import FieldError, Setting
from wenet_lite.search.context import HOTWORDS_SCORE, ContextGraph, load_context
from wenet_lite.search.lm import LM_WEIGHT, OOV_PENALTY, WORD_BONUS, LMScorer
from wenet_lite.search.rescore import RESCORE_CTC_WEIGHT, RESCORE_REVERSE_WEIGHT

if TYPE_CHECKING:
    from wenet_lite.data.tokenizer import Tokenizer

__all__ = ["SEARCH_MODES", "SearchMode", "SearchModels", "SearchOptions", "TRANSDUCER_MODES"]

SearchMode = Literal[
    "greedy", "prefix_beam", "attention_rescoring", "transducer_greedy", "transducer_beam"
]
SEARCH_MODES = (
    "greedy", "prefix_beam", "attention_rescoring", "transducer_greedy", "transducer_beam"
)  # fmt: skip
TRANSDUCER_MODES = ("transducer_greedy", "transducer_beam")
"""the modes of the transducer head (the others search the CTC head's log-probabilities)"""
_BEAM_MODES = {
    "beam": Setting("mode", "prefix_beam"),
    "rescore": Setting("mode", "attention_rescoring"),
}


@dataclass(frozen=True)
class SearchOptions:
    """How CTC log-probabilities become text."""

    mode: SearchMode = field(
        default="greedy",
        metadata=flag(
            "--mode",
            "greedy, prefix_beam: CTC search; attention_rescoring: prefix beam, then the "
            "model's attention decoder re-ranks each final segment's n-best; transducer_greedy, "
            "transducer_beam (modified beam search, --beam): the transducer head's",
        ),
    )
    beam_size: Optional[int] = field(
        default=None,
        metadata=flag("--beam", "prefix beam size (default: the model config's decode.beam_size)"),
    )
    nbest: Optional[int] = field(
        default=None,
        metadata=flag(
            "--nbest",
            "prefix_beam: hypotheses kept per utterance (default: decode.nbest); "
            "attention_rescoring: hypotheses rescored (default: the beam size)",
        ),
    )
    token_min_logp: Optional[float] = field(
        default=None,
        metadata=flag(
            "--token-min-logp",
            "prefix_beam: skip a frame's tokens below this log-prob, e.g. -5 (default: none)",
            metavar="LOGP",
        ),
    )
    blank_penalty: float = field(
        default=0.0,
        metadata=flag(
            "--blank-penalty",
            "subtracted from the blank's logit before every search (the CTC "
            "head's, the transducer joiner's; sherpa-onnx's blank_penalty), e.g. 0.5",
        ),
    )
    lm: Optional[str] = field(
        default=None,
        metadata=flag(
            "--lm",
            "prefix_beam: word LM (`wenet-lite train-lm` JSON, .arpa[.gz], or a KenLM binary file)",
        ),
    )
    lm_backend: Literal["auto", "kenlm", "python"] = field(
        default="auto",
        metadata=flag(
            "--lm-backend",
            "what reads an ARPA --lm: kenlm (the kenlm extra; also KenLM's binary files), "
            "python, auto (kenlm where installed)",
        ),
    )
    lm_weight: float = field(
        default=LM_WEIGHT, metadata=flag("--lm-weight", "weight of the LM's log-probabilities")
    )
    word_bonus: float = field(
        default=WORD_BONUS, metadata=flag("--word-bonus", "score added per completed word")
    )
    oov_penalty: float = field(
        default=OOV_PENALTY,
        metadata=flag("--oov-penalty", "score taken where a word leaves the LM's vocabulary"),
    )
    # The three LM defaults are the best of a grid on the synthetic dev set (docs/results.md).
    hotwords: Optional[str] = field(
        default=None,
        metadata=flag(
            "--hotwords",
            "prefix_beam, transducer_beam: file of phrases to favour, one a line, `PHRASE` or "
            "`PHRASE :SCORE`",
            metavar="FILE",
        ),
    )
    hotwords_score: float = field(
        default=HOTWORDS_SCORE,
        metadata=flag("--hotwords-score", "bonus per matched hotword token (a phrase's own wins)"),
    )

    max_symbols: int = field(
        default=4,
        metadata=flag(
            "--max-symbols",
            "transducer_greedy: tokens one frame may emit (1: sherpa-onnx's greedy search)",
        ),
    )

    ctc_weight: float = field(
        default=RESCORE_CTC_WEIGHT,
        metadata=flag(
            "--ctc-weight", "attention_rescoring: weight of the prefix beam's score (LM included)"
        ),
    )
    reverse_weight: float = field(
        default=RESCORE_REVERSE_WEIGHT,
        metadata=flag(
            "--reverse-weight",
            "attention_rescoring: share of the right-to-left decoder in the decoder's score",
        ),
    )

    def __post_init__(self) -> None:
        if self.mode not in SEARCH_MODES:
            raise ValueError(f"search mode must be one of {SEARCH_MODES}, got {self.mode!r}")
        if self.beam_size is not None and self.beam_size < 1:
            raise ValueError(f"beam size must be >= 1, got {self.beam_size}")
        if self.nbest is not None and not 1 <= self.nbest <= (self.beam_size or self.nbest):
            raise ValueError(f"nbest must be in 1..beam size ({self.beam_size}), got {self.nbest}")
        if self.lm is not None and not self.beam:
            raise FieldError("a word LM ({lm}) needs the prefix beam ({beam} or {rescore})",
                             lm=Setting("lm"), **_BEAM_MODES)  # fmt: skip
        if self.lm_backend not in ("auto", "kenlm", "python"):
            raise FieldError("{b} is not auto, kenlm or python",
                             b=Setting("lm_backend", self.lm_backend))  # fmt: skip
        if self.lm_weight < 0:
            raise ValueError(f"lm weight must be >= 0, got {self.lm_weight}")
        if self.oov_penalty < 0:
            raise ValueError(f"oov penalty must be >= 0, got {self.oov_penalty}")
        if self.hotwords is not None and not self.takes_hotwords:
            raise FieldError(
                "hotwords ({hot}) need a beam: the prefix beam ({beam} or {rescore}) or the "
                "transducer's ({tbeam})", hot=Setting("hotwords"),
                tbeam=Setting("mode", "transducer_beam"), **_BEAM_MODES,
            )  # fmt: skip
        if self.max_symbols < 1:
            raise FieldError(f"{{n}} must be >= 1, got {self.max_symbols}",
                             n=Setting("max_symbols"))  # fmt: skip
        if self.ctc_weight < 0:
            raise ValueError(f"ctc weight must be >= 0, got {self.ctc_weight}")
        if not 0.0 <= self.reverse_weight <= 1.0:
            raise ValueError(f"reverse weight must be in [0, 1], got {self.reverse_weight}")

    @property
    def beam(self) -> bool:
        """Whether the search is the CTC prefix beam (alone or under attention rescoring)."""
        return self.mode in ("prefix_beam", "attention_rescoring")

    @property
    def takes_hotwords(self) -> bool:
        """Whether the search fuses hotwords: the CTC prefix beam and the transducer's beam."""
        return self.beam or self.mode == "transducer_beam"

    @property
    def transducer(self) -> bool:
        """Whether the transducer head searches (``TRANSDUCER_MODES``)."""
        return self.mode in TRANSDUCER_MODES

    @property
    def rescoring(self) -> bool:
        return self.mode == "attention_rescoring"

    def resolved(self, defaults: DecodeConfig) -> SearchOptions:
        """A copy whose beam size and nbest default to a model config's ``decode`` section."""
        beam = self.beam_size
        if beam is None:  # a transducer's beam is small (icefall, sherpa-onnx: 4)
            beam = min(defaults.beam_size, 4) if self.mode == "transducer_beam" else \
                defaults.beam_size  # fmt: skip
        nbest = self.nbest
        if nbest is None:
            nbest = beam if self.rescoring else min(defaults.nbest, beam)
        return dataclasses.replace(self, beam_size=beam, nbest=nbest)

    def describe(self) -> str:
        """One line for summaries, e.g. ``prefix_beam (beam 20, token min log-prob -5) + LM``."""
        text = "greedy"
        if self.mode == "transducer_greedy":
            text = f"transducer greedy ({self.max_symbols} symbol(s) a frame)"
        elif self.mode == "transducer_beam":
            text = f"transducer modified beam (beam {self.beam_size})"
        if self.beam:
            prune = (
                "" if self.token_min_logp is None else f", token min log-prob {self.token_min_logp}"
            )
            text = f"prefix_beam (beam {self.beam_size}{prune})"
        if self.blank_penalty:
            text += f", blank penalty {self.blank_penalty}"
        if self.lm is not None:
            oov = f", oov penalty {self.oov_penalty}" if self.oov_penalty else ""
            text += f" + LM {self.lm} (weight {self.lm_weight}, word bonus {self.word_bonus}{oov})"
        if self.hotwords is not None:
            text += f" + hotwords {self.hotwords} ({self.hotwords_score} per token)"
        if self.rescoring:
            text += (
                f" + attention rescoring ({self.nbest}-best, ctc weight {self.ctc_weight}, "
                f"reverse weight {self.reverse_weight})"
            )
        return text

    def load(self, tokenizer: Optional[Tokenizer]) -> SearchModels:
        """The word LM and the hotword graph these options name, over ``tokenizer``'s pieces."""
        scorer = context = None
        if (self.lm is not None or self.hotwords is not None) and tokenizer is None:
            raise RuntimeError("a word LM or hotwords need the model's tokenizer")
        if self.lm is not None:
            scorer = LMScorer.load(
                self.lm, tokenizer.pieces(), self.lm_weight, self.word_bonus, self.oov_penalty,
                self.lm_backend,
            )  # fmt: skip
        if self.hotwords is not None:
            context = load_context(self.hotwords, tokenizer, self.hotwords_score)
        return SearchModels(scorer, context)


class SearchModels(NamedTuple):
    """What a search fuses: a word LM and a hotword graph, either None."""

    scorer: Optional[LMScorer]
    context: Optional[ContextGraph]
