"""Import time of a full-size WeNet model, and the streaming cost of WeNet's position term.

Development only (it builds the WeNet model with WeNet's own code, like wenet_golden.py):

    python benchmarks/bench_wenet_import.py --wenet /tmp/wenet

writes a LibriSpeech-shaped U2++ model (conformer 12 x 256, 4 heads, FFN 2048, kernel 15,
random weights) as WeNet saves it, times `import_wenet` on it, then times one stream's chunk
(C=16, N=4, one thread, torch engine) of the imported model against a model of the same size
with this toolkit's true relative positions, interleaved, and prints both as a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # wenet_golden
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import wenet_golden  # noqa: E402

from wenet_lite.files.model_file import load_model  # noqa: E402
from wenet_lite.host.cpu import cpu_summary  # noqa: E402
from wenet_lite.model import build_model  # noqa: E402
from wenet_lite.model.chunking import Chunking  # noqa: E402
from wenet_lite.runtime.engines import TorchEngine  # noqa: E402
from wenet_lite.wenet.convert import import_wenet  # noqa: E402


def _chunk_ms(engine: TorchEngine, feats: torch.Tensor, chunks: int) -> float:
    """Median milliseconds per chunk of one stream over ``chunks`` chunks after 5 warm-up."""
    window = feats.size(1)
    state = engine.init_state(1)
    lens = torch.tensor([window])
    times = []
    for i in range(chunks + 5):
        start = time.perf_counter()
        _, state = engine.run(feats, lens, state)
        if i >= 5:
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wenet", required=True, type=Path, help="WeNet's source (wenet_golden.py)")
    p.add_argument("--chunks", type=int, default=100, help="chunks timed per round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    wenet_golden._stand_ins(args.wenet.resolve())
    wenet_golden.D, wenet_golden.UNITS, wenet_golden.BLOCKS = 256, 2048, 12
    with tempfile.TemporaryDirectory() as tmp:
        wenet_golden.write_case("librispeech", Path(tmp), seed=1)
        model_dir = Path(tmp) / "librispeech"
        start = time.perf_counter()
        out = import_wenet(model_dir, Path(tmp) / "imported.pt")
        import_s = time.perf_counter() - start
        size_mb = (model_dir / "final.pt").stat().st_size / 1e6
        imported, _, cfg = load_model(out)
    relative_cfg = dataclasses.replace(
        cfg, encoder=dataclasses.replace(cfg.encoder, pos_enc="xl", conv_pad="zero")
    )
    relative = build_model(relative_cfg, imported.ctc.proj.out_features).eval()
    chunking = Chunking(16, 4)
    engines = {"WeNet positions (imported)": TorchEngine(imported, chunking),
               "relative positions (ours)": TorchEngine(relative, chunking)}  # fmt: skip
    window = imported.encoder.subsampling.window_size(16)
    feats = torch.randn(1, window, 80)
    rounds = {name: [] for name in engines}
    with torch.inference_mode():
        for _ in range(args.rounds):  # interleaved: drift on a shared machine hits both
            for name, engine in engines.items():
                rounds[name].append(_chunk_ms(engine, feats, args.chunks))
    print(f"CPU: {cpu_summary()}, torch {torch.__version__}, 1 thread")
    print(f"import of a 12 x 256 LibriSpeech-shaped model ({size_mb:.0f} MB final.pt): "
          f"{import_s:.2f} s")  # fmt: skip
    base = min(rounds["relative positions (ours)"])
    print("| model | ms per chunk (C=16, N=4, best of rounds) | ratio |")
    print("|---|---:|---:|")
    for name, values in rounds.items():
        print(f"| {name} | {min(values):.2f} | {min(values) / base:.2f}x |")


if __name__ == "__main__":
    main()
