"""`train --device`: one device choice, checked against the machine and the torchrun job,
every misfit one line (CUDA is simulated where this machine has none)."""

from __future__ import annotations

import pytest
import torch

from wenet_lite.train.dist import DeviceError, choose_device


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_cpu_whatever_the_machine() -> None:
    assert choose_device("cpu", 1, 0) == torch.device("cpu")
    assert choose_device("cpu", 4, 3) == torch.device("cpu")  # gloo ranks on a GPU machine too


def test_default_is_cuda_when_there_is_one(monkeypatch, one_gpu) -> None:
    assert choose_device(None, 1, 0) == torch.device("cuda", 0)
    assert choose_device("cuda", 1, 0) == torch.device("cuda", 0)
    assert choose_device("cuda:0", 1, 0) == torch.device("cuda", 0)


def test_default_is_cpu_without_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device(None, 1, 0) == torch.device("cpu")
    with pytest.raises(
        DeviceError, match=r'device="cuda": CUDA is not available here.*device="cpu"'
    ):
        choose_device("cuda", 1, 0)


def test_more_ranks_than_gpus_is_one_line(one_gpu) -> None:
    assert choose_device("cuda", 2, 0) == torch.device("cuda", 0)
    with pytest.raises(DeviceError) as e:
        choose_device("cuda", 2, 1)  # the second rank of a node with one GPU
    message = str(e.value)
    assert "1 GPU(s) for at least 2 ranks" in message and 'device="cpu" (gloo)' in message
    assert "\n" not in message
    with pytest.raises(DeviceError, match='device="cuda:0" under torchrun'):
        choose_device("cuda:0", 2, 0)
    with pytest.raises(DeviceError, match="has 1 GPU"):
        choose_device("cuda:3", 1, 0)
    with pytest.raises(DeviceError, match="not a device"):
        choose_device("gpu0", 1, 0)
    with pytest.raises(DeviceError, match="cpu or cuda"):
        choose_device("meta", 1, 0)


def test_cli_names_the_device_in_one_line(synthetic_corpus, tmp_path, capsys) -> None:
    from wenet_lite.cli import main

    argv = ["train", "--config", "conf/tiny_test.yaml", "--data", str(synthetic_corpus.data),
            "--exp", str(tmp_path / "exp"), "--device", "tpu"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device tpu is not a device" in err
