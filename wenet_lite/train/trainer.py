"""`wenet-lite train`: prepared cuts and a config in, checkpoints and logs in ``exp_dir`` out.

Inputs: ``data/<part>/cuts.jsonl.gz`` for the train parts (concatenated) and the dev parts,
and global CMVN statistics (default ``data/cmvn.json``, from `wenet-lite compute-cmvn`).
Training cuts with stored fbank (`wenet-lite compute-fbank`, made with this features config)
load it instead of their audio at speed 1.0, when the workers compute the fbank
(``data.fbank``: ``workers``, or ``auto`` on CPU); with ``device`` (``auto`` on CUDA) the workers
deliver samples and the loop computes the batch's fbank on the device.
The tokenizer is trained on the training transcripts at the start of a fresh run (rank 0,
then broadcast) unless ``tokenizer`` names an existing model; it is written to
``exp_dir/tokenizer.model`` and travels in every checkpoint.

``exp_dir`` receives ``config.yaml`` (resolved), ``train.log``, ``tensorboard/``,
``tokenizer.model``, ``skipped.json`` and ``step_N.pt`` checkpoints (every
``train.checkpoint_interval`` steps and at each epoch end, the newest
``train.keep_checkpoints`` kept). Under torchrun every rank trains and only rank 0 writes.

Resume (``resume=True``) continues from the newest checkpoint: weights, optimizer, scheduler,
grad scaler, the sampler position (epoch, batches done), the chunk-size generator, every
rank's torch RNG (dropout) and the skip counts. Data augmentation is seeded per utterance,
so the continued run computes exactly what an uninterrupted run would have. The model,
features and tokenizer sections of the config must match the checkpoint's; train and data
settings may change (e.g. a larger ``train.max_steps``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from wenet_lite.config import (
    ConfigError,
    ExperimentConfig,
    config_from_dict,
    config_to_dict,
    load_config,
    read_config_dict,
    save_config,
)
from wenet_lite.config.fields import FieldError, Says, Setting, literal, raised
from wenet_lite.data.commands import allowing
from wenet_lite.data.dataset import Batch
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.cmvn import load_cmvn
from wenet_lite.features.torch_fbank import TorchFbank
from wenet_lite.files.checkpoint import (
    MODEL_SECTIONS,
    check_same_model,
    load_checkpoint,
)
from wenet_lite.model import ASRModel, build_model
from wenet_lite.model.asr import compile_for_training
from wenet_lite.model.subsampling import min_input_frames
from wenet_lite.train.dist import (
    DistInfo,
    check_restart_store,
    cleanup_distributed,
    elastic_restart,
    init_distributed,
    may_restart,
)
from wenet_lite.train.loop import Progress, Trainer, TrainParts
from wenet_lite.train.resume import (
    agreed_checkpoints,
    restore_training_state,
    save_training_checkpoint,
)
from wenet_lite.train.scheduler import WarmupLR
from wenet_lite.train.sources import (
    TrainData,
    fbank_on_device,
    load_parts,
    load_train_data,
    read_cmvn_bytes,
    train_and_dev_loaders,
)

__all__ = ["TrainOptions", "TrainResult", "train"]

_log = logging.getLogger("wenet_lite.train")


@dataclass(frozen=True)
class TrainOptions:
    config: Path
    data: Path
    """prepared data root holding ``<part>/cuts.jsonl.gz``"""
    exp: Path
    overrides: Tuple[str, ...] = ()
    train_parts: Tuple[str, ...] = ("train-clean-100",)
    dev_parts: Tuple[str, ...] = ("dev-clean",)
    """empty: no validation"""
    cmvn: Optional[Path] = None
    """default ``data/cmvn.json``"""
    tokenizer: Optional[Path] = None
    """an existing tokenizer model to use instead of training one"""
    resume: bool = False
    init: Optional[Path] = None
    """a model file (checkpoint, averaged or imported) to start from: its weights, and its
    tokenizer and CMVN unless ``tokenizer``/``cmvn`` are given; the optimizer and schedule
    start fresh. The config must describe the same model (a differing key fails)."""
    progress_bar: bool = True
    device: Optional[str] = None
    """cpu, cuda (under torchrun: each rank its cuda:LOCAL_RANK) or cuda:N; None: cuda when
    available, else cpu"""
    train_weights: Optional[Tuple[float, ...]] = None
    """one per train part: each epoch draws the parts by weight (``data/sampler.py``'s
    ``Mix``) instead of joining them"""


@dataclass
class TrainResult:
    step: int
    epoch: int
    """the next epoch to train (max_epochs + 1 when all are done)"""
    losses: Dict[int, float]
    """step -> rank 0's mean training loss per utterance, for the steps of this run"""
    nonfinite_steps: int
    empty_batches: int
    """this rank's batches (this run) in which every utterance was skipped"""
    skipped: Dict[str, Dict[str, Dict[str, int]]] = field(default_factory=dict)
    dev_loss: Optional[float] = None
    """full-context dev loss of the last validation (None if none ran)"""
    model: Optional[ASRModel] = None
    """the trained model (this rank's copy; equal on every rank)"""
    is_main: bool = True


def train(opts: TrainOptions) -> TrainResult:
    """Train as ``opts`` says; works alone or in every process of a torchrun job."""
    owns_group = not dist.is_initialized()
    info = init_distributed(opts.device)
    handler = None
    package_log = logging.getLogger("wenet_lite")
    level = package_log.level
    parts: Optional[TrainParts] = None
    deterministic = torch.are_deterministic_algorithms_enabled()
    stack = contextlib.ExitStack()
    try:
        if info.is_main:
            check_restart_store()
        cfg, resumed = _config_and_checkpoint(opts, info)
        stack.enter_context(allowing(cfg.data.allow_commands))  # the loaders' workers too
        if cfg.train.deterministic:
            _use_deterministic_algorithms()
        if info.is_main:
            handler = _start_exp_dir(opts.exp, cfg)
        else:
            package_log.setLevel(logging.WARNING)  # rank 0 reports
        parts, progress = _build(opts, cfg, resumed, info)
        state = Trainer(parts, progress).run()
        return TrainResult(
            step=state.step,
            epoch=state.epoch,
            losses=state.losses,
            nonfinite_steps=state.nonfinite_steps,
            empty_batches=state.empty_batches,
            skipped=state.skipped,
            dev_loss=state.dev_loss,
            model=parts.model,
            is_main=info.is_main,
        )
    finally:
        if parts is not None and parts.writer is not None:
            parts.writer.close()
        if handler is not None:
            package_log.removeHandler(handler)
            handler.close()
        package_log.setLevel(level)
        torch.use_deterministic_algorithms(deterministic)
        stack.close()
        if owns_group:
            cleanup_distributed()


def _use_deterministic_algorithms() -> None:
    """``train.deterministic``: every kernel deterministic, or an error naming the one that
    is not. cuBLAS needs a fixed workspace for that (read when CUDA starts: the CLI sets it
    before; a caller that already used CUDA sets CUBLAS_WORKSPACE_CONFIG itself)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def _config_and_checkpoint(
    opts: TrainOptions, info: DistInfo
) -> Tuple[ExperimentConfig, Optional[Tuple[Path, Dict]]]:
    """The config, and the newest checkpoint (path, payload) when resuming (``resume``, or
    under torchrun with ``--max-restarts``)."""
    elastic = may_restart() and not opts.resume
    found, resume = agreed_checkpoints(opts.exp, opts.resume or elastic, info)
    if found and elastic:
        _log.info(
            "torchrun restarted the workers (restart %d): resuming from the newest checkpoint",
            elastic_restart(),
        )  # fmt: skip
    opts = dataclasses.replace(opts, resume=resume)
    if found and not opts.resume:
        raise FieldError(
            f"{literal(opts.exp)} already holds checkpoints ({literal(found[-1].name)}, ...): "
            "pass {resume} to continue, or choose another {exp}",
            resume=Setting("resume", True), exp=Setting("exp"),
        )  # fmt: skip
    if opts.init is not None:  # the architecture of the model it starts from
        cfg = _config_of_init(opts)
    else:
        cfg = load_config(opts.config, opts.overrides)
    if not found:
        if opts.resume and not elastic:
            _log.info(Says("{resume}: no checkpoint in %s, starting from scratch",
                           resume=Setting("resume", True)), opts.exp)  # fmt: skip
        return cfg, None
    payload = load_checkpoint(found[-1])
    check_same_model(payload["config"], config_to_dict(cfg), str(found[-1]))
    _log.info("resuming from %s", found[-1])
    return cfg, (found[-1], payload)


def _config_of_init(opts: TrainOptions) -> ExperimentConfig:
    """``--init``: the model's sections (features, encoder, decoder, tokenizer) come from the
    model file; the config gives the rest (data, training, loss weights). A model key the
    config sets explicitly must agree with the file's (ConfigError naming it); a new tokenizer
    may differ from the model's."""
    assert opts.init is not None
    given = read_config_dict(opts.config, opts.overrides)
    saved = config_to_dict(config_from_dict(load_checkpoint(opts.init)["config"]))
    sections = [s for s in MODEL_SECTIONS if s != "tokenizer" or opts.tokenizer is None]
    explicit = {s: given[s] for s in sections if isinstance(given.get(s), dict)}
    check_same_model(saved, explicit, str(opts.init), sections, complete=False)
    merged = {**given, **{s: saved[s] for s in sections}}
    try:
        return config_from_dict(merged)
    except ConfigError as e:
        raise ConfigError(e.path, f"{e.message} (in {opts.config})") from None


def _start_exp_dir(exp: Path, cfg: ExperimentConfig) -> logging.Handler:
    exp.mkdir(parents=True, exist_ok=True)
    save_config(cfg, exp / "config.yaml")
    handler = logging.FileHandler(exp / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("wenet_lite")
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    return handler


def _weights(opts: TrainOptions) -> Optional[Dict[str, float]]:
    """The train parts' weights (None: the parts are joined)."""
    if opts.train_weights is None:
        return None
    if len(opts.train_weights) != len(opts.train_parts):
        raise ValueError(
            f"{len(opts.train_weights)} weight(s) for {len(opts.train_parts)} train part(s)"
        )
    return dict(zip(opts.train_parts, opts.train_weights))


def _tokenizer(
    opts: TrainOptions, cfg: ExperimentConfig, train: TrainData, info: DistInfo
) -> Tokenizer:
    """Rank 0 trains (or loads) it and broadcasts the bytes: no shared file system needed."""
    proto: List[Optional[bytes]] = [None]
    if info.is_main:
        if opts.tokenizer is not None:
            tokenizer = Tokenizer.load(opts.tokenizer)
            tokenizer.save(opts.exp / "tokenizer.model")
            if tokenizer.vocab_size != cfg.tokenizer.vocab_size:
                _log.warning(
                    "%s has %d pieces, not tokenizer.vocab_size %d: the model follows the file",
                    opts.tokenizer, tokenizer.vocab_size, cfg.tokenizer.vocab_size,
                )  # fmt: skip
        else:
            tokenizer = Tokenizer.train(train.texts(), cfg.tokenizer, opts.exp / "tokenizer.model")
            _log.info("trained tokenizer %s (%d pieces)", opts.exp / "tokenizer.model",
                      tokenizer.vocab_size)  # fmt: skip
        proto[0] = tokenizer.to_bytes()
    if dist.is_initialized():
        dist.broadcast_object_list(proto, src=0)
    return Tokenizer.from_bytes(proto[0])


def _read_cmvn(path: Path, cfg: ExperimentConfig) -> Tuple[torch.Tensor, torch.Tensor]:
    if not path.is_file():
        raise raised(
            FileNotFoundError,
            f"CMVN statistics not found: {literal(path)}; compute them first (`wenet-lite "
            "compute-cmvn`), or give their file with {cmvn}", cmvn=Setting("cmvn"),
        )  # fmt: skip
    mean, istd = load_cmvn(path)  # (F,), (F,)
    if mean.numel() != cfg.features.num_mel_bins:
        raise ValueError(
            f"{path}: CMVN has {mean.numel()} bins but features.num_mel_bins is "
            f"{cfg.features.num_mel_bins}"
        )
    return mean, istd


def _build(
    opts: TrainOptions,
    cfg: ExperimentConfig,
    resumed: Optional[Tuple[Path, Dict]],
    info: DistInfo,
) -> Tuple[TrainParts, Progress]:
    payload = resumed[1] if resumed is not None else None
    mixed = opts.train_weights is not None
    train_data = load_train_data(opts.data, opts.train_parts, opts.exp, info, mixed)
    weights = _weights(opts)
    dev_cuts = load_parts(opts.data, opts.dev_parts) if opts.dev_parts else None
    start = _initial_model(opts) if payload is None and opts.init is not None else None
    if payload is not None:  # the checkpoint holds CMVN (model buffers) and tokenizer
        tokenizer = Tokenizer.from_bytes(payload["tokenizer"])
    else:
        if start is not None and opts.cmvn is None:
            mean, istd = start[0].encoder.cmvn.mean, start[0].encoder.cmvn.istd
        else:
            mean, istd = _read_cmvn(opts.cmvn or read_cmvn_bytes(opts.data, opts.exp), cfg)
        if start is not None and opts.tokenizer is None:
            tokenizer = start[1]
            if info.is_main:
                tokenizer.save(opts.exp / "tokenizer.model")
        else:
            tokenizer = _tokenizer(opts, cfg, train_data, info)
    torch.manual_seed(cfg.train.seed)  # identical initial weights on every rank
    model = build_model(cfg, tokenizer.vocab_size)
    if payload is not None:
        model.load_state_dict(payload["model"])
    else:
        if start is not None:
            _load_initial_weights(model, start[0], opts.init)
        model.encoder.cmvn.mean.copy_(mean)
        model.encoder.cmvn.istd.copy_(istd)
    model.to(info.device).train()
    torch.manual_seed(cfg.train.seed + info.rank)  # dropout differs per rank
    layers = model.encoder.subsampling.layers
    loaders = train_and_dev_loaders(cfg, tokenizer, layers, train_data, dev_cuts, info, weights)
    parts = _train_parts(opts, cfg, model, tokenizer, loaders, layers, info)
    progress = Progress()
    if resumed is not None:
        restore_training_state(parts, progress, *resumed)
    return parts, progress


def _initial_model(opts: TrainOptions) -> Tuple[ASRModel, Tokenizer]:
    from wenet_lite.files.model_file import load_model

    assert opts.init is not None
    model, tokenizer, _ = load_model(opts.init)
    _log.info("starting from the weights of %s (optimizer and schedule start fresh)", opts.init)
    return model, tokenizer


def _load_initial_weights(model: ASRModel, start: ASRModel, path: Optional[Path]) -> None:
    """``start``'s weights into ``model``; layers whose shape differs (the output layers, for
    a tokenizer of another size) keep their fresh initialisation and are named. A model
    without a transducer head gets one, with new weights (a CTC model becomes a hybrid)."""
    own = model.state_dict()
    given = start.state_dict()
    fresh = sorted(k for k, v in given.items() if k in own and own[k].shape != v.shape)
    kept = {k: v for k, v in given.items() if k not in fresh}
    missing, unexpected = model.load_state_dict(kept, strict=False)
    added = [k for k in missing if k.startswith("transducer.")]
    if added and start.transducer is None:
        missing = [k for k in missing if k not in added]
        _log.info("%s has no transducer head: one is added with new weights (%d tensors, %s "
                  "parameters)", path, len(added),
                  f"{sum(own[k].numel() for k in added):,}")  # fmt: skip
    if unexpected or set(missing) != set(fresh):
        odd = (missing or unexpected)[:3]
        raise ValueError(f"{path}: its weights do not fit this model: {odd}")
    if fresh:
        _log.warning(
            "%s: new output layers for the tokenizer's %d pieces (the model had %d): %s start "
            "from scratch", path, model.ctc.proj.out_features, start.ctc.proj.out_features,
            ", ".join(fresh),
        )  # fmt: skip


def _dummy_batch(cfg: ExperimentConfig, layers: List[Tuple[int, int]]) -> Batch:
    """One all-zero utterance just long enough for one encoder frame and one token."""
    frames = min_input_frames(layers)
    return Batch(
        torch.zeros(1, frames, cfg.features.num_mel_bins),
        torch.tensor([frames]),
        torch.ones(1, 1, dtype=torch.long),
        torch.tensor([1]),
        ["<dummy>"],
        [""],
        {},
    )


def freeze_encoder_layers(model: ASRModel, n: int) -> None:
    """Keep the subsampling front end and the first ``n`` Conformer blocks as they are (no
    gradients, not in the optimizer); ValueError beyond the encoder's blocks."""
    if n == 0:
        return
    encoder = model.encoder
    if n > encoder.num_blocks:
        raise ValueError(
            f"train.freeze_encoder_layers: {n}, but the encoder has {encoder.num_blocks} blocks"
        )
    for module in [encoder.subsampling, *encoder.blocks[:n]]:
        module.requires_grad_(False)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    _log.info(
        "frozen: the subsampling and encoder blocks 1-%d (%.2f M of %.2f M parameters)",
        n, frozen / 1e6, total / 1e6,
    )  # fmt: skip


def _train_parts(
    opts: TrainOptions,
    cfg: ExperimentConfig,
    model: ASRModel,
    tokenizer: Tokenizer,
    loaders: Dict[str, Any],
    layers: List[Tuple[int, int]],
    info: DistInfo,
) -> TrainParts:
    tc = cfg.train
    freeze_encoder_layers(model, tc.freeze_encoder_layers)
    optim_cls = torch.optim.AdamW if tc.optimizer == "adamw" else torch.optim.Adam
    # Fused: one kernel for all parameters, and a step skipped on the device (``found_inf``)
    # when the gradient norm is not finite, without reading the norm back every step.
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = optim_cls(trained, lr=tc.lr, weight_decay=tc.weight_decay, fused=True)
    use_scaler = info.device.type == "cuda" and tc.precision == "fp16"
    if tc.compile:
        compile_for_training(model)
    wrapped: torch.nn.Module = model
    if info.world_size > 1:
        ids = [info.device.index] if info.device.type == "cuda" else None
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    fbank = None
    if fbank_on_device(cfg, info.device):
        fbank = TorchFbank(cfg.features).to(info.device)
    writer = None
    if info.is_main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(opts.exp / "tensorboard"))
    return TrainParts(
        cfg=cfg,
        exp_dir=opts.exp,
        dist=info,
        model=model,
        wrapped=wrapped,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=WarmupLR(
            optimizer, tc.warmup_steps, tc.schedule, tc.max_steps, tc.final_lr_scale
        ),
        scaler=torch.amp.GradScaler("cuda") if use_scaler else None,
        sampler=loaders["sampler"],
        train_loader=loaders["train_loader"],
        dev_loader=loaders["dev_loader"],
        train_filtered=loaders["train_filtered"],
        dev_filtered=loaders["dev_filtered"],
        chunk_gen=torch.Generator().manual_seed(tc.seed),
        dummy=_dummy_batch(cfg, layers),
        fbank=fbank,
        writer=writer,
        save=save_training_checkpoint,
        progress_bar=opts.progress_bar,
    )
