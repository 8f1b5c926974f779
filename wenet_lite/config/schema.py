"""Typed, strict experiment configuration: one frozen dataclass per component, composed into
:class:`ExperimentConfig`, each checking its own settings (a :class:`FieldRule` names the
field; the reader, ``loading.py``, prefixes the section's dotted path). Reading YAML and
``--set`` overrides is ``loading.py``'s.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Literal, Tuple

__all__ = [
    "ConfigError",
    "flag",
    "FeatureConfig",
    "SpecAugConfig",
    "ChunkConfig",
    "EncoderConfig",
    "DecoderConfig",
    "ModelConfig",
    "TransducerConfig",
    "TokenizerConfig",
    "DataConfig",
    "TrainConfig",
    "DecodeConfig",
    "ExperimentConfig",
    "FieldRule",
    "SIZE_LIMITS",
    "short_repr",
]


def flag(name: str, help: str, **argparse_kwargs: Any) -> Dict[str, Any]:
    """A field's metadata: its command-line flag, help text and extra argparse arguments."""
    return {"flag": name, "help": help, **argparse_kwargs}


class ConfigError(ValueError):
    """A config value is unknown, mistyped or inconsistent; the message starts with its key path."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


@dataclass(frozen=True)
class FeatureConfig:
    """Kaldi-compatible log-mel filterbank (kaldi-native-fbank), identical in train and decode."""

    sample_rate: int = 16000
    """Hz; every input is resampled to this rate."""
    num_mel_bins: int = 80
    """mel filter banks per frame: the model's input width (the demo config uses 40)"""
    frame_length_ms: float = 25.0
    """analysis window per frame (Povey window)"""
    frame_shift_ms: float = 10.0
    """hop between frames; the encoder's frame is this times the subsampling rate"""
    dither: float = 1.0
    """Gaussian dither on int16-scaled samples, training only (decoding always uses 0)."""
    snip_edges: bool = False
    """Kaldi's snip_edges: true drops the frames that overhang the ends; false (sherpa-onnx's
    and the streaming fbank's) centres frames and mirrors the edges"""
    high_freq: float = -400.0
    """Hz, the top edge of the highest mel filter; <= 0 counts from the Nyquist frequency
    (Kaldi's convention): -400 is 7600 Hz at 16 kHz (sherpa-onnx's features), 0 the whole band
    (WeNet's)."""

    def __post_init__(self) -> None:
        _require(self.sample_rate > 0, "sample_rate", f"must be positive, got {self.sample_rate}")
        nyquist = self.sample_rate / 2
        top = self.high_freq if self.high_freq > 0 else nyquist + self.high_freq
        _require(
            20.0 < top <= nyquist, "high_freq",
            f"({self.high_freq}) puts the top mel edge at {top:g} Hz; it must lie above 20 Hz "
            f"and at most at the Nyquist frequency ({nyquist:g} Hz)",
        )  # fmt: skip
        _require(
            self.num_mel_bins > 0, "num_mel_bins", f"must be positive, got {self.num_mel_bins}"
        )
        _require(self.frame_shift_ms > 0, "frame_shift_ms", "must be positive")
        _require(
            self.frame_length_ms >= self.frame_shift_ms,
            "frame_length_ms",
            f"({self.frame_length_ms}) is shorter than frame_shift_ms ({self.frame_shift_ms})",
        )
        _require(self.dither >= 0, "dither", f"must be >= 0, got {self.dither}")


@dataclass(frozen=True)
class SpecAugConfig:
    """SpecAugment on fbank features during training."""

    enabled: bool = True
    """SpecAugment on the training features (never when decoding)"""
    num_freq_masks: int = 2
    """frequency bands masked per utterance, each up to max_freq_width bins"""
    max_freq_width: int = 10
    """mel bins"""
    num_time_masks: int = 2
    """time spans masked per utterance, each up to max_time_width frames"""
    max_time_width: int = 40
    """fbank frames (10 ms each)"""
    start_step: int = 0
    """optimizer step from which masks are applied (early steps learn faster without them)"""

    def __post_init__(self) -> None:
        for name in ("num_freq_masks", "max_freq_width", "num_time_masks", "max_time_width"):
            _require(getattr(self, name) >= 0, name, f"must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class ChunkConfig:
    """Which frames a query may attend to: the one switch between full context and streaming.

    Sizes count encoder frames (after subsampling).
    """

    mode: Literal["full", "static", "dynamic"] = "full"
    """full: whole utterance; static: always chunks of `size`; dynamic: random chunk per batch"""
    size: int = 16
    """chunk size for static training, and the default for chunked decoding"""
    left_chunks: int = -1
    """chunks of history each chunk sees (-1: all)"""
    full_prob: float = 0.5
    """dynamic: probability that a batch trains with full context"""
    max_size: int = 25
    """dynamic: chunk size drawn uniformly from 1..max_size"""
    random_left_chunks: bool = False
    """dynamic: also draw the left-chunk count uniformly from 0..max_left_chunks"""
    max_left_chunks: int = 8
    """dynamic with random_left_chunks: the largest left-chunk count drawn"""

    def __post_init__(self) -> None:
        _require(self.size > 0, "size", f"must be positive, got {self.size}")
        _require(self.left_chunks >= -1, "left_chunks", f"must be >= -1, got {self.left_chunks}")
        _require(
            0.0 <= self.full_prob <= 1.0, "full_prob", f"must be in [0, 1], got {self.full_prob}"
        )
        _require(self.max_size > 0, "max_size", f"must be positive, got {self.max_size}")
        _require(self.max_left_chunks >= 0, "max_left_chunks", "must be >= 0")


@dataclass(frozen=True)
class EncoderConfig:
    """Conformer encoder dimensions; all sizes in encoder frames unless stated."""

    d_model: int = 256
    """width of every Conformer block (the attention, convolution and residual stream)"""
    num_heads: int = 4
    """attention heads per block (d_model must divide by it)"""
    ffn_dim: int = 2048
    """hidden width of each block's two feed-forward modules"""
    num_blocks: int = 12
    """Conformer blocks"""
    subsampling_rate: int = 4
    """conv2d front-end: 4, 6 or 8 input frames per encoder frame"""
    subsampling_channels: int = 0
    """channels of the front-end's conv layers (0: d_model); its second conv costs
    channels^2, so a small model trains much faster with fewer (e.g. 64 for d_model 144)"""
    conv_kernel: int = 15
    """depthwise convolution kernel in frames (causal: all of it on the left; its K - 1 inputs
    are the stream's conv cache)"""
    causal_conv: bool = True
    """left-only depthwise conv; required for chunked (streaming) attention"""
    conv_norm: Literal["layer_norm", "batch_norm"] = "layer_norm"
    """normalisation after the depthwise convolution: layer_norm or batch_norm (WeNet's default;
    its running statistics when decoding)"""
    pos_enc: Literal["xl", "shaw", "wenet"] = "xl"
    """xl: sinusoid of the signed distance + projection (Transformer-XL); shaw: learned table;
    wenet: the same projection of the keys' absolute positions, no shift (WeNet's term; whole
    utterances only: streaming such a model is refused)"""
    max_rel_dist: int = 0
    """clipping radius Z for relative distances (0: no clipping; shaw needs Z > 0)"""
    dropout: float = 0.1
    """dropout on the blocks' module outputs and the feed-forward hidden layer (training only)"""
    attention_dropout: float = 0.0
    """dropout on the attention weights (training only)"""
    final_norm: bool = False
    """a LayerNorm after the last block (WeNet's ``after_norm``)"""
    norm_eps: float = 1e-5
    """epsilon of every LayerNorm of the encoder (WeNet's models from before 2022: 1e-12)"""
    conv_pad: Literal["zero", "wenet"] = "zero"
    """what the causal conv sees before a stream's first frame: zero depthwise inputs, or
    WeNet's (zero inputs of the block, i.e. the GLU of the first pointwise conv's bias)"""
    chunk: ChunkConfig = field(default_factory=ChunkConfig)

    def __post_init__(self) -> None:
        _require(self.subsampling_channels >= 0, "subsampling_channels", "must be >= 0")
        for name in ("d_model", "num_heads", "ffn_dim", "num_blocks", "conv_kernel"):
            _require(getattr(self, name) > 0, name, f"must be positive, got {getattr(self, name)}")
        _within_limits(self, ("d_model", "num_heads", "ffn_dim", "num_blocks", "conv_kernel",
                              "subsampling_channels", "max_rel_dist"))  # fmt: skip
        _require(
            self.d_model % self.num_heads == 0,
            "d_model",
            f"({self.d_model}) is not divisible by encoder.num_heads ({self.num_heads})",
        )
        _require(
            self.d_model % 2 == 0, "d_model", f"must be even for sinusoids, got {self.d_model}"
        )
        _require(
            self.subsampling_rate in (4, 6, 8),
            "subsampling_rate",
            f"must be 4, 6 or 8, got {self.subsampling_rate}",
        )
        _require(
            self.causal_conv or self.conv_kernel % 2 == 1,
            "conv_kernel",
            f"must be odd for a non-causal conv, got {self.conv_kernel}",
        )
        _require(
            self.causal_conv or self.chunk.mode == "full",
            "causal_conv",
            f"is false but encoder.chunk.mode is {self.chunk.mode!r}: a non-causal conv sees "
            "future frames, so streaming would not match training",
        )
        _require(
            self.pos_enc != "shaw" or self.max_rel_dist > 0,
            "max_rel_dist",
            "must be > 0 with pos_enc 'shaw' (the size of its learned table)",
        )
        _require(self.max_rel_dist >= 0, "max_rel_dist", f"must be >= 0, got {self.max_rel_dist}")
        _require(0 < self.norm_eps < 1, "norm_eps", f"must be in (0, 1), got {self.norm_eps}")
        for name in ("dropout", "attention_dropout"):
            _require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")


@dataclass(frozen=True)
class DecoderConfig:
    """The optional attention decoder of U2++ (Wu et al. 2021): transformer blocks over the
    tokens so far that cross-attend to the encoder output, left to right and right to left.
    It rescores the CTC search's n-best (``--mode attention_rescoring``); CTC alone streams."""

    type: Literal["none", "bitransformer"] = "none"
    """none: CTC only; bitransformer: a left-to-right and a right-to-left decoder"""
    num_blocks: int = 3
    """left-to-right decoder blocks"""
    r2l_num_blocks: int = 3
    """right-to-left decoder blocks (0: left to right only; needs model.reverse_weight 0)"""
    num_heads: int = 4
    """attention heads per decoder block"""
    ffn_dim: int = 2048
    """hidden width of each decoder block's feed-forward module"""
    dropout: float = 0.1
    """dropout in the decoder blocks (training only)"""
    attention_dropout: float = 0.0
    """dropout on the decoder's attention weights (training only)"""
    activation: Literal["silu", "relu"] = "silu"
    """of the feed-forward layers (WeNet's decoders: relu)"""
    norm_eps: float = 1e-5
    """epsilon of every LayerNorm of the decoder"""
    sos_eos_id: int = -1
    """-1: start and end of sentence is an extra id after the tokenizer's (the decoder has
    V + 1 outputs); else that id inside the vocabulary (WeNet's ``<sos/eos>``)"""
    detach_encoder: bool = False
    """true: the decoder's loss trains the decoder only, not the encoder it reads (CTC then
    trains the encoder as it would alone; for short budgets, or a decoder added to a trained
    CTC model); false: joint training as U2++"""

    def __post_init__(self) -> None:
        for name in ("num_blocks", "num_heads", "ffn_dim"):
            _require(getattr(self, name) > 0, name, f"must be positive, got {getattr(self, name)}")
        _require(self.r2l_num_blocks >= 0, "r2l_num_blocks", "must be >= 0")
        _within_limits(self, ("num_blocks", "r2l_num_blocks", "num_heads", "ffn_dim"))
        for name in ("dropout", "attention_dropout"):
            _require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")
        _require(0 < self.norm_eps < 1, "norm_eps", f"must be in (0, 1), got {self.norm_eps}")
        _require(
            self.sos_eos_id == -1 or self.sos_eos_id > 0, "sos_eos_id",
            f"must be -1 or an id > 0 (0 is the blank), got {self.sos_eos_id}",
        )  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """How the training loss joins the heads: ``transducer_weight * transducer + (1 -
    transducer_weight) * (ctc_weight * CTC + (1 - ctc_weight) * ((1 - reverse_weight) * L2R +
    reverse_weight * R2L)) + ramp * cr_ctc_weight * w_ctc * consistency``, where ``w_ctc`` is
    the weight CTC has in the sum before it and ``ramp`` rises from 0 to 1 over
    ``cr_warmup_steps``; each term summed over tokens (frames for the consistency) and divided
    by the batch size; a head the model lacks drops out."""

    ctc_weight: float = 0.3
    """weight of the CTC loss against the attention decoder's (1.0 when the model has no decoder)"""
    reverse_weight: float = 0.3
    """share of the right-to-left decoder in the attention loss"""
    lsm_weight: float = 0.1
    """label smoothing of the decoder's targets"""
    transducer_weight: float = 0.0
    """the transducer head's share of the loss (0: no transducer head; see ``transducer``)"""
    cr_ctc_weight: float = 0.0
    """consistency-regularised CTC: two SpecAugment views of each utterance in one batch and
    the divergence between their CTC posteriors weighted this many times the CTC loss's own
    weight (0: off; 0.2 as icefall: 0.2 beside CTC alone, 0.02 beside CTC 0.1 in a hybrid)"""
    cr_warmup_steps: int = 2000
    """steps over which the consistency weight rises linearly from 0 (icefall's warm_step):
    two untrained views pulled together from step 0 agree on blanks"""
    cr_time_mask_ratio: float = 2.5
    """with CR-CTC, time masks are this many times ``specaug.num_time_masks`` (as the paper)"""
    cr_start_step: int = 0
    """with CR-CTC, the step from which each batch is seen in two views and the consistency
    term counts, its ramp starting there; before it one view with ``specaug``'s own masks (CTC
    + SpecAugment at one view's cost): a curriculum inside one run, one learning-rate schedule"""

    def __post_init__(self) -> None:
        _require(0.0 <= self.transducer_weight <= 1.0, "transducer_weight", "must be in [0, 1]")
        _require(self.cr_ctc_weight >= 0.0, "cr_ctc_weight", "must be >= 0")
        _require(self.cr_warmup_steps >= 0, "cr_warmup_steps", "must be >= 0")
        _require(self.cr_time_mask_ratio >= 1.0, "cr_time_mask_ratio", "must be >= 1")
        _require(self.cr_start_step >= 0, "cr_start_step", "must be >= 0")
        _require(0.0 <= self.ctc_weight <= 1.0, "ctc_weight", "must be in [0, 1]")
        _require(0.0 <= self.reverse_weight <= 1.0, "reverse_weight", "must be in [0, 1]")
        _require(0.0 <= self.lsm_weight < 1.0, "lsm_weight", "must be in [0, 1)")


@dataclass(frozen=True)
class TransducerConfig:
    """The transducer head (built when ``model.transducer_weight`` > 0): a stateless predictor
    over the last ``context`` tokens and a joiner, trained with the pruned RNN-T loss."""

    predictor_dim: int = 0
    """the predictor's width (0: the encoder's d_model)"""
    joiner_dim: int = 0
    """the joiner's width (0: the encoder's d_model)"""
    context: int = 2
    """tokens the predictor sees (icefall's stateless decoder: 2)"""
    prune_range: int = 5
    """symbol positions a frame keeps in the pruned loss (k2's s_range)"""
    simple_loss_scale: float = 0.5
    """weight of the simple joiner's loss beside the pruned loss (after the warm-up)"""
    warmup_steps: int = 2000
    """steps over which the simple loss falls from 1 to its scale and the pruned loss rises
    from 0.1 to 1 (icefall's warm_step)"""
    delay_penalty: float = 0.0
    """k2's delay penalty: emitting late costs more, pulling emissions earlier (e.g. 0.1)"""
    lm_scale: float = 0.25
    """the simple loss smoothed (k2's ``rnnt_loss_smoothed``, icefall's 0.25): this share of
    each arc's log-probability is the predictor's alone, which trains it from the first step
    and shapes the pruning windows"""
    am_scale: float = 0.0
    """this share the encoder's alone, against the tokens' mean frequency (icefall's 0)"""

    def __post_init__(self) -> None:
        for name in ("predictor_dim", "joiner_dim"):
            value = getattr(self, name)
            _require(0 <= value <= SIZE_LIMITS["d_model"], name,
                     f"must be in 0..{SIZE_LIMITS['d_model']}, got {value}")  # fmt: skip
        _require(1 <= self.context <= 16, "context", f"must be in 1..16, got {self.context}")
        _require(self.prune_range >= 2, "prune_range", f"must be >= 2, got {self.prune_range}")
        _require(self.simple_loss_scale >= 0.0, "simple_loss_scale", "must be >= 0")
        _require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        _require(self.delay_penalty >= 0.0, "delay_penalty", "must be >= 0")
        for name in ("lm_scale", "am_scale"):
            _require(0.0 <= getattr(self, name) <= 1.0, name, "must be in [0, 1]")
        _require(self.lm_scale + self.am_scale <= 1.0, "lm_scale",
                 "and am_scale must add up to at most 1")  # fmt: skip


@dataclass(frozen=True)
class TokenizerConfig:
    """sentencepiece model trained on the training transcripts; id 0 is the CTC blank."""

    model_type: Literal["unigram", "bpe", "char"] = "unigram"
    """the SentencePiece algorithm (unigram or bpe), or char: one token per character"""
    vocab_size: int = 256
    """including the blank and <unk>"""

    def __post_init__(self) -> None:
        _require(self.vocab_size >= 3, "vocab_size", f"must be >= 3, got {self.vocab_size}")


@dataclass(frozen=True)
class DataConfig:
    """How utterances become batches."""

    max_batch_seconds: float = 200.0
    """total audio seconds per batch (before padding)"""
    min_duration: float = 0.3
    """seconds; shorter utterances are skipped and counted"""
    max_duration: float = 20.0
    """seconds; longer utterances are skipped and counted"""
    num_buckets: int = 10
    """duration buckets of the batch sampler: a batch takes utterances of one bucket, so little
    of it is padding"""
    speed_perturb: Tuple[float, ...] = (1.0,)
    """speed factors drawn uniformly per utterance, e.g. [0.9, 1.0, 1.1]"""
    num_workers: int = 1
    """DataLoader worker processes that read audio and compute features (`train --jobs`
    overrides)"""
    fbank: Literal["auto", "workers", "device"] = "auto"
    """where training fbank is computed: ``workers`` (DataLoader workers, kaldi-native-fbank;
    stored fbank is used), ``device`` (the workers only decode, resample and dither; the trainer
    computes the padded batch's fbank on its device in torch, equal within 1e-3), ``auto``:
    device on CUDA, workers on CPU. Dev scoring always uses workers."""
    shuffle: bool = True
    """shuffle the batches every epoch (seeded by train.seed and the epoch, so a resumed run
    sees the same order)"""
    sort_first_epoch: bool = False
    """train the first epoch on batches in increasing duration ("SortaGrad", Amodei et al.
    2016, sec. 3.1): short utterances first shorten CTC's all-blank phase; later epochs are
    shuffled"""
    shuffle_buffer: int = 500
    """sharded data: utterances held in each read stream's shuffle buffer (more mixes shards
    better and holds more encoded audio in memory: ~0.2 MB an utterance)"""
    sort_buffer: int = 200
    """sharded data: utterances sorted by duration and packed into batches together"""
    skip_bad_shards: bool = False
    """sharded data: a shard that cannot be read is skipped (its utterances counted as
    unreadable_audio) instead of stopping training with its name"""
    allow_commands: bool = False
    """shell commands that data files name run: a ``pipe:`` line of a shard list, a lhotse
    source of type ``command`` or a ``pipe:`` URL (``data/commands.py``). The flag
    ``--allow-data-commands`` sets it; the trainer applies it in its loader workers too"""

    def __post_init__(self) -> None:
        _require(self.max_batch_seconds > 0, "max_batch_seconds", "must be positive")
        _require(
            0 <= self.min_duration < self.max_duration,
            "min_duration",
            "must be in [0, max_duration)",
        )
        _require(
            self.max_duration <= self.max_batch_seconds,
            "max_duration",
            f"({self.max_duration}) exceeds data.max_batch_seconds ({self.max_batch_seconds})",
        )
        _require(self.num_buckets > 0, "num_buckets", "must be positive")
        _require(
            len(self.speed_perturb) > 0 and all(s > 0 for s in self.speed_perturb),
            "speed_perturb",
            f"must be a non-empty list of positive factors, got {self.speed_perturb}",
        )
        _require(self.num_workers >= 0, "num_workers", "must be >= 0")
        _require(self.shuffle_buffer >= 1, "shuffle_buffer", "must be >= 1")
        _require(self.sort_buffer >= 1, "sort_buffer", "must be >= 1")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, checkpoints and logging."""

    optimizer: Literal["adam", "adamw"] = "adam"
    """adam (weight_decay added to the gradient as an L2 term) or adamw (decoupled weight decay)"""
    lr: float = 1e-3
    """peak learning rate, reached at the end of warmup"""
    warmup_steps: int = 25000
    """steps of linear warmup to the peak lr"""
    schedule: Literal["noam", "cosine"] = "noam"
    """after warmup: noam (inverse square root, open-ended) or cosine (decays to
    ``final_lr_scale`` * lr at ``max_steps``, which it requires)"""
    final_lr_scale: float = 0.02
    """cosine: the learning rate at max_steps, as a share of the peak"""
    weight_decay: float = 1e-6
    """the optimizer's weight decay"""
    max_epochs: int = 100
    """stop after this many passes over the training data (or at max_steps, whichever comes
    first)"""
    max_steps: int = 0
    """stop after this many optimizer steps (0: no limit)"""
    grad_clip: float = 5.0
    """clip the gradients' global norm to this before each optimizer step"""
    accum_grad: int = 1
    """batches whose gradients are summed per optimizer step (a larger effective batch at the
    same memory)"""
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"
    """autocast dtype of the forward pass: on CUDA bf16 or fp16 as asked; on the CPU bf16 only
    where the CPU multiplies it natively (AMX, AVX-512 bf16), else fp32 with a warning; ``auto``:
    bf16 where it is native (CPU) or supported (CUDA), else fp32. The CTC loss and the
    optimizer's state are fp32 in every case; `train.log` says what trained"""
    compile: bool = False
    """run the model's forward and backward through ``torch.compile`` (dynamic shapes: a
    handful of compilations per run, not one per batch length); checkpoints are the same"""
    deterministic: bool = False
    """deterministic algorithms only (``torch.use_deterministic_algorithms``, cuBLAS workspace
    ``:4096:8``, CTC's backward on the CPU when training on CUDA): a resumed CUDA run repeats
    an uninterrupted one exactly, at a cost. CPU training is deterministic without it"""
    seed: int = 777
    """seeds the initial weights, dropout, batch order and augmentation: one seed, one run"""
    log_interval: int = 10
    """steps between the loss lines of train.log"""
    checkpoint_interval: int = 0
    """save a checkpoint every N optimizer steps (0: only at epoch ends)"""
    keep_checkpoints: int = 5
    """newest checkpoints kept in the experiment dir (older ones are deleted; `average` averages
    among these)"""
    freeze_encoder_layers: int = 0
    """fine-tuning: the subsampling front end and the first N Conformer blocks keep their
    weights (0: all train)"""

    def __post_init__(self) -> None:
        _require(self.lr > 0, "lr", f"must be positive, got {self.lr}")
        _require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        _require(0 <= self.final_lr_scale <= 1, "final_lr_scale", "must be in [0, 1]")
        _require(
            self.schedule != "cosine" or self.max_steps > self.warmup_steps,
            "schedule",
            f"cosine decays to train.max_steps, which must exceed train.warmup_steps "
            f"({self.warmup_steps}); got max_steps {self.max_steps}",
        )
        _require(self.max_epochs > 0, "max_epochs", "must be positive")
        _require(self.max_steps >= 0, "max_steps", "must be >= 0")
        _require(self.grad_clip > 0, "grad_clip", "must be positive")
        _require(self.accum_grad >= 1, "accum_grad", "must be >= 1")
        _require(self.log_interval >= 1, "log_interval", "must be >= 1")
        _require(self.checkpoint_interval >= 0, "checkpoint_interval", "must be >= 0")
        _require(self.keep_checkpoints >= 1, "keep_checkpoints", "must be >= 1")
        _require(self.freeze_encoder_layers >= 0, "freeze_encoder_layers", "must be >= 0")


@dataclass(frozen=True)
class DecodeConfig:
    """Search defaults; flags of `wenet-lite decode` / `stream` override them."""

    beam_size: int = 10
    """prefix beam size when `--beam` is not given"""
    nbest: int = 1
    """hypotheses the prefix beam keeps per utterance when `--nbest` is not given"""

    def __post_init__(self) -> None:
        _require(self.beam_size >= 1, "beam_size", "must be >= 1")
        _require(1 <= self.nbest <= self.beam_size, "nbest", "must be in 1..beam_size")


@dataclass(frozen=True)
class ExperimentConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    specaug: SpecAugConfig = field(default_factory=SpecAugConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    transducer: TransducerConfig = field(default_factory=TransducerConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        _require(
            self.model.cr_ctc_weight == 0.0 or self.specaug.enabled,
            "model.cr_ctc_weight",
            f"is {self.model.cr_ctc_weight}: CR-CTC compares two SpecAugment views of each "
            "utterance, and specaug.enabled is false",
        )
        dec = self.decoder
        if dec.type == "none":
            return
        _require(
            self.encoder.d_model % dec.num_heads == 0,
            "decoder.num_heads",
            f"({dec.num_heads}) does not divide encoder.d_model ({self.encoder.d_model}), the "
            "decoder's width",
        )
        _require(
            dec.r2l_num_blocks > 0 or self.model.reverse_weight == 0.0,
            "model.reverse_weight",
            f"is {self.model.reverse_weight} but decoder.r2l_num_blocks is 0 (no right-to-left "
            "decoder to weigh)",
        )


SIZE_LIMITS = {"d_model": 8192, "num_heads": 256, "ffn_dim": 65536, "num_blocks": 256,
               "r2l_num_blocks": 256, "conv_kernel": 1023, "subsampling_channels": 8192,
               "max_rel_dist": 100_000}  # fmt: skip
"""Upper bounds of the model's sizes, far above any speech model (conformer_u2: 256 wide,
12 blocks): a typo or a hostile file beyond them is refused before anything is built (a
million-wide encoder asked for 36 TB; 100,000 blocks built for minutes)."""


def _within_limits(section: Any, names: Iterable[str]) -> None:
    for name in names:
        limit = SIZE_LIMITS[name]
        value = getattr(section, name)
        _require(value <= limit, name, f"must be <= {limit}, got {value}")


class FieldRule(Exception):
    """Raised inside a dataclass's __post_init__; the loader prefixes the section path."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


def _require(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise FieldRule(name, message)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxtuple = 2, 4, 4, 4
_SHORT.maxstring, _SHORT.maxother = 60, 60


def short_repr(value: Any) -> str:
    """``repr`` cut short: a YAML anchor bomb (1 KB of text, 10^9 leaves) is shown in a few
    dozen characters instead of being walked whole (minutes, gigabytes)."""
    return _SHORT.repr(value)
