"""Run by test_ddp.py under torchrun: train, then write this rank's weight digest as JSON.

Usage: ddp_train.py DATA EXP OUT_DIR TOKENIZER [KEY=VALUE ...]
"""

import hashlib
import json
import sys
from pathlib import Path

import torch

from wenet_lite.train.trainer import TrainOptions, train


def digest(state: dict) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    torch.set_num_threads(1)
    data, exp, out, tokenizer = (Path(a) for a in sys.argv[1:5])
    opts = TrainOptions(
        Path("conf/tiny_test.yaml"), data, exp, tuple(sys.argv[5:]), ("salted",), ("dev",),
        tokenizer=tokenizer, progress_bar=False, device="cpu",  # gloo ranks, GPUs or not
    )  # fmt: skip
    result = train(opts)
    assert result.model is not None
    rank = 0 if result.is_main else int(__import__("os").environ["RANK"])
    report = {
        "digest": digest(result.model.state_dict()),
        "step": result.step,
        "empty_batches": result.empty_batches,
        "skipped": result.skipped,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
