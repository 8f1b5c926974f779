#!/usr/bin/env python3
"""Training throughput, side by side in one run: the loader alone, the bare step (eager and
compiled), and the whole trainer, in audio seconds per second, with peak memory.

Usage:
    python benchmarks/bench_train.py --config conf/conformer_u2.yaml --data data
        [--device cpu|cuda|cuda:N] [--steps 12] [--warmup 4] [--threads 2] [--no-compile]
        [--train-part train-clean-100] [--set KEY=VALUE ...]

Rows (each over the same number of batches of the config's sampler, after ``--warmup``):

- ``loader``: the trainer's DataLoader alone (its workers, speed perturbation, fbank where
  ``data.fbank`` puts it: in the workers, or here on the device), no model;
- ``bare step``: forward + CTC (+ attention decoder) + backward + clip + Adam on batches made
  beforehand and already on the device (autocast as ``train.precision`` says), nothing else;
- ``bare step, compiled``: the same with ``train.compile`` (compilation in the warm-up steps);
- ``trainer``: `wenet-lite train` itself (``wenet_lite.train.trainer.train``) for
  ``--warmup + --steps`` steps, logging every ``--warmup`` steps; its rate is that of the
  windows after the first, from train.log.

``x bare`` is a row's rate over the eager bare step's: the trainer's share of what the model
can do. Below the rows, the step against the CPU's arithmetic: the model's FLOPs per second
of training audio (forward and backward, counted by ``torch.utils.flop_counter`` on the first
batch), the forward's share of each part (subsampling, feed-forward, attention projections,
attention scores and positions, convolution module, CTC, attention decoder, transducer), the
GFLOP/s the bare step achieves, and the practical peak: one large matrix product on the same
threads, fp32 (and bf16 where the CPU multiplies it natively). Peak memory is the device's
allocator peak per row on CUDA; on the CPU, the trainer's peak RSS (with its largest
DataLoader worker; it runs first, and RSS peaks only grow).
Needs prepared data and DATA/cmvn.json.
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

_WINDOW = re.compile(r"step (\d+): .* audio ([\d.]+) s/s \(([\d.]+) s\)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--train-part", default="train-clean-100")
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if any)")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per row")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps before them")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="leave out the compiled row")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    args = ap.parse_args()
    if args.steps % args.warmup:
        ap.error(f"--steps ({args.steps}) must be a multiple of --warmup ({args.warmup})")
    torch.set_num_threads(args.threads)

    from wenet_lite.config import ConfigError, load_config
    from wenet_lite.train.dist import DeviceError, choose_device

    overrides = tuple(args.overrides)
    try:
        device = choose_device(args.device, 1, 0)
        cfg = load_config(args.config, overrides)
    except (DeviceError, ConfigError, FileNotFoundError) as e:
        ap.error(str(e))
    from wenet_lite.host.cpu import cpu_summary

    print(cpu_summary())
    rows: List[Tuple[str, float, float, int]] = []  # name, audio s/s, peak MiB, steps
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "exp"
        rate, peak = _trainer(args, overrides, exp, device)
        tokenizer_path = exp / "tokenizer.model"
        batches, loader_rate, loader_peak = _loader(args, cfg, tokenizer_path, device)
        rows.append(("loader", loader_rate, loader_peak, args.steps))
        bare, bare_peak = _bare(args, cfg, tokenizer_path, batches, device, False)
        rows.append(("bare step", bare, bare_peak, args.steps))
        if not args.no_compile:
            compiled, compiled_peak = _bare(args, cfg, tokenizer_path, batches, device, True)
            rows.append(("bare step, compiled", compiled, compiled_peak, args.steps))
        rows.append(("trainer", rate, peak, args.steps))
        flops = _flops(cfg, tokenizer_path, batches[0], device)
    _print(args, cfg, device, rows, bare)
    _print_flops(flops, bare, args.threads, device)
    return 0


def _trainer(
    args: argparse.Namespace, overrides: Tuple[str, ...], exp: Path, device: torch.device
) -> Tuple[float, float]:
    from wenet_lite.train.trainer import TrainOptions, train

    _reset_peak(device)
    steps = args.warmup + args.steps
    # noam: a cosine schedule would need max_steps beyond its warm-up; speed is the same.
    sets = (*overrides, f"train.max_steps={steps}", f"train.log_interval={args.warmup}",
            "train.schedule=noam")  # fmt: skip
    train(
        TrainOptions(
            Path(args.config), args.data, exp, sets, (args.train_part,), (),
            progress_bar=False, device=str(device),
        )
    )  # fmt: skip
    windows = [(float(m.group(3)), float(m.group(2))) for m in _WINDOW.finditer(
        (exp / "train.log").read_text())][1:]  # fmt: skip
    audio = sum(a for a, _ in windows)
    seconds = sum(a / r for a, r in windows)
    return audio / seconds, _peak(device)


def _loader(
    args: argparse.Namespace, cfg, tokenizer_path: Path, device: torch.device
) -> Tuple[list, float, float]:
    """Iterate the trainer's DataLoader; returns the batches (features on the device), the
    rate and peak memory."""
    from wenet_lite.data.tokenizer import Tokenizer
    from wenet_lite.features.torch_fbank import TorchFbank
    from wenet_lite.model.subsampling import subsampling_layers
    from wenet_lite.train.dist import DistInfo
    from wenet_lite.train.sources import build_loaders, load_parts

    tokenizer = Tokenizer.load(tokenizer_path)
    cuts = load_parts(args.data, (args.train_part,))
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    loaders = build_loaders(cfg, tokenizer, layers, cuts, None, DistInfo(0, 1, 0, device))
    loaders["sampler"].set_epoch(1)
    fbank = TorchFbank(cfg.features).to(device)
    _reset_peak(device)
    batches, audio, start = [], 0.0, 0.0
    for i, batch in enumerate(loaders["train_loader"]):
        if i == args.warmup:
            _sync(device)
            audio, start = 0.0, time.perf_counter()
        if batch.samples is not None:
            feats, _ = fbank(batch.samples.to(device), batch.sample_lens.to(device))
        else:
            feats = batch.feats.to(device)
        batches.append((feats, batch))
        audio += float(batch.feats_lens.sum()) * cfg.features.frame_shift_ms / 1000
        if i + 1 == args.warmup + args.steps:
            break
    _sync(device)
    if len(batches) < args.warmup + args.steps:
        raise SystemExit(f"{args.train_part}: fewer than {args.warmup + args.steps} batches")
    return batches, audio / (time.perf_counter() - start), _peak(device)


def _bare(
    args: argparse.Namespace, cfg, tokenizer_path: Path, batches: list, device: torch.device,
    compiled: bool,
) -> Tuple[float, float]:  # fmt: skip
    """Forward, backward and optimizer step alone over ``batches``."""
    from wenet_lite.data.tokenizer import Tokenizer
    from wenet_lite.model import build_model
    from wenet_lite.model.asr import compile_for_training
    from wenet_lite.model.mask import sample_chunk
    from wenet_lite.train.precision import autocast_for

    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, Tokenizer.load(tokenizer_path).vocab_size).to(device).train()
    if compiled:
        compile_for_training(model)
    tc = cfg.train
    optim_cls = torch.optim.AdamW if tc.optimizer == "adamw" else torch.optim.Adam
    optimizer = optim_cls(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay, fused=True)
    chunk_gen = torch.Generator().manual_seed(tc.seed)
    moved = [
        (feats, b.feats_lens.to(device), b.targets.to(device), b.target_lens.to(device))
        for feats, b in batches
    ]
    _reset_peak(device)
    audio, start = 0.0, 0.0
    for i, (feats, lens, targets, target_lens) in enumerate(moved):
        if i == args.warmup:
            _sync(device)
            audio, start = 0.0, time.perf_counter()
        chunk, left = sample_chunk(cfg.encoder.chunk, chunk_gen)
        with autocast_for(tc.precision, device, cfg.encoder.d_model):
            loss, _, _ = model(feats, lens, targets, target_lens, chunk, left)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.found_inf = (~torch.isfinite(norm)).float()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        audio += float(batches[i][1].feats_lens.sum()) * cfg.features.frame_shift_ms / 1000
    _sync(device)
    return audio / (time.perf_counter() - start), _peak(device)


_PARTS = (  # (row, module name patterns): the first that matches a leaf module names its part
    ("subsampling", (".subsampling.",)),
    ("feed-forward", (".ff1.", ".ff2.", ".ffn.")),
    ("attention projections", (".attn.qkv", ".attn.out", ".attn.q", ".attn.k", ".attn.v")),
    ("attention scores and positions", (".attn.", ".rel_pos.")),
    ("convolution module", (".conv.",)),
    ("CTC", ("ASRModel.ctc",)),
    ("attention decoder", ("ASRModel.decoder",)),
    ("transducer", ("ASRModel.transducer",)),
)


def _part_of(name: str) -> str:
    return next((p for p, keys in _PARTS if any(k in name + "." for k in keys)), "other")


def flops_by_part(counts: Dict[str, float], part_of: Callable[[str], str]) -> Dict[str, float]:
    """FlopCounterMode's counts per module name summed by ``part_of(name)``, each module with its
    own FLOPs: less those of the modules counted below it whose nearest counted ancestor it is
    (containers such as a ModuleList count nothing and are skipped over)."""

    def parent(name: str) -> str:
        while "." in name:
            name = name.rpartition(".")[0]
            if name in counts:
                return name
        return ""

    below: Dict[str, float] = {}
    for name, flops in counts.items():
        below[parent(name)] = below.get(parent(name), 0.0) + flops
    parts: Dict[str, float] = {}
    for name, flops in counts.items():
        part = part_of(name)
        parts[part] = parts.get(part, 0.0) + flops - below.get(name, 0.0)
    return parts


def _flops(cfg, tokenizer_path: Path, first: tuple, device: torch.device) -> dict:
    """The FLOPs of one training step on the first batch: the total (forward and backward)
    and each part's forward (the counter's module attribution holds for the forward only),
    per second of its audio."""
    from torch.utils.flop_counter import FlopCounterMode

    from wenet_lite.data.tokenizer import Tokenizer
    from wenet_lite.model import build_model

    feats, b = first
    model = build_model(cfg, Tokenizer.load(tokenizer_path).vocab_size).to(device).train()
    args = (feats, b.feats_lens.to(device), b.targets.to(device), b.target_lens.to(device))
    audio = float(b.feats_lens.sum()) * cfg.features.frame_shift_ms / 1000
    with FlopCounterMode(display=False, depth=None) as forward:
        loss, _, _ = model(*args)
    with FlopCounterMode(display=False) as both:
        loss, _, _ = model(*args)
        loss.backward()
    counts = {name: sum(ops.values()) for name, ops in forward.get_flop_counts().items()}
    total_forward = counts.pop("Global", 0)
    parts = flops_by_part(counts, _part_of)
    return {"train": both.get_total_flops() / audio, "forward": total_forward / audio,
            "parts": {k: v / audio for k, v in parts.items() if v > 0}}  # fmt: skip


def gemm_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 10) -> float:
    """GFLOP/s of an n x n x n matrix product on torch's threads (best of ``repeats``)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _print_flops(flops: dict, bare: float, threads: int, device: torch.device) -> None:
    from wenet_lite.host.cpu import native_bf16

    achieved = flops["train"] * bare / 1e9
    print(f"\nFLOPs per second of training audio: {flops['train'] / 1e9:.2f} G (forward and "
          f"backward; forward {flops['forward'] / 1e9:.2f} G)")  # fmt: skip
    print("\n| part | forward GFLOP per audio s | share |\n|---|---|---|")
    for part, value in sorted(flops["parts"].items(), key=lambda kv: -kv[1]):
        print(f"| {part} | {value / 1e9:.3f} | {100 * value / flops['forward']:.1f} % |")
    if device.type != "cpu":
        print(f"\nbare step: {achieved:.1f} GFLOP/s on {device}")
        return
    peaks = [("fp32", gemm_peak(torch.float32))]
    if native_bf16():
        peaks.append(("bf16", gemm_peak(torch.bfloat16)))
    shown = ", ".join(f"{name} {gflops:.0f} GFLOP/s" for name, gflops in peaks)
    print(
        f"\nbare step: {achieved:.1f} GFLOP/s on {threads} thread(s), "
        f"{100 * achieved / peaks[0][1]:.0f} % of one 2048^3 matrix product's ({shown})"
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":  # the current device: some torch versions refuse a bare "cuda"
        torch.cuda.reset_peak_memory_stats()


def _peak(device: torch.device) -> float:
    """MiB: the device allocator's peak on CUDA, else the process's (and workers') peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return own + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _print(args, cfg, device: torch.device, rows, bare: float) -> None:
    from wenet_lite.train.precision import training_precision

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    trains = training_precision(cfg.train.precision, device, cfg.encoder.d_model)
    print(
        f"{args.config} on {device} ({name}, {args.threads} threads), train.precision "
        f"{cfg.train.precision}: {trains}, data.fbank "
        f"{cfg.data.fbank}, {cfg.data.num_workers} workers, speed perturbation "
        f"{list(cfg.data.speed_perturb)}; {args.steps} steps a row after {args.warmup}"
    )
    cuda = device.type == "cuda"
    # A process's peak RSS only grows: on the CPU it is the trainer's (run first), alone.
    memory = "peak GPU MiB" if cuda else "peak RSS MiB (with workers)"
    print(f"\n| | audio s/s | x bare step | {memory} |\n|---|---|---|---|")
    for row, rate, peak, _ in rows:
        shown = f"{peak:.0f}" if cuda or row == "trainer" else "-"
        print(f"| {row} | {rate:.1f} | {rate / bare:.2f}x | {shown} |")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FileNotFoundError, ValueError) as e:  # data and config that do not fit: one line
        sys.exit(f"bench_train.py: error: {e}")
