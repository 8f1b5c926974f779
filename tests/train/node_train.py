"""Run by test_multinode.py under torchrun (one rank per node): train, write this rank's
weight digest.

Usage: node_train.py DATA EXP OUT_DIR TOKENIZER [KEY=VALUE ...]
"""

import json
import logging
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from ddp_train import digest  # noqa: E402

from wenet_lite.train.dist import elastic_restart  # noqa: E402
from wenet_lite.train.trainer import TrainOptions, train  # noqa: E402


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    data, exp, out, tokenizer = (Path(a) for a in sys.argv[1:5])
    rank = int(os.environ["RANK"])
    pause = float(os.environ.get("NODE_STEP_PAUSE", "0"))  # slow steps: a test kills a node
    step_digests = []

    from wenet_lite.train.loop import Trainer

    step = Trainer._optimizer_step

    def checked_step(self, *args):  # noqa: ANN001, ANN202
        time.sleep(pause)
        out = step(self, *args)
        step_digests.append(digest(self.p.model.state_dict()))  # the weights after each step
        return out

    Trainer._optimizer_step = checked_step
    opts = TrainOptions(
        Path("conf/tiny_test.yaml"), data, exp, tuple(sys.argv[5:]), ("train",), (),
        tokenizer=tokenizer, progress_bar=False, device="cpu",
    )  # fmt: skip
    result = train(opts)
    assert result.model is not None
    report = {"digest": digest(result.model.state_dict()), "step": result.step,
              "restart": elastic_restart(), "node": os.environ.get("GROUP_RANK"),
              "steps": step_digests}  # fmt: skip
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
