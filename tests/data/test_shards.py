"""Shards: written as Lhotse Shar (lhotse reads them back), read from a folder, over HTTP and
through a pipe, WeNet shard tars as they are, and an epoch's plan that trains on every
utterance exactly once across ranks and workers."""

from __future__ import annotations

import functools
import http.server
import io
import tarfile
import threading
from collections import Counter
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest
import soundfile as sf
import torch

from wenet_lite.config import load_config
from wenet_lite.data.dataset import ASRDataset, load_features, load_stored_fbank, utterance_seed
from wenet_lite.data.manifest import cut_samples, load_cuts
from wenet_lite.data.prepare_shards import prepare_shards
from wenet_lite.data.shard_sampler import ShardDataset, ShardPart, ShardSampler
from wenet_lite.data.shards import SHARD_LIST, Shard, ShardIndex, find_shards, read_shard
from wenet_lite.data.storage import ShardError, Storage
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.model.subsampling import subsampling_layers
from wenet_lite.train.dist import DistInfo
from wenet_lite.train.sources import load_train_data, shard_loader

TINY = Path("conf/tiny_test.yaml")
CPU = DistInfo(0, 1, 0, torch.device("cpu"))


@pytest.fixture(scope="module")
def shards(synthetic_corpus, tmp_path_factory) -> Path:
    """train-clean-100 (55 utterances) as shards of 8 with stored fbank, dev-clean of 4."""
    out = tmp_path_factory.mktemp("shards")
    cfg = load_config(TINY)
    data = synthetic_corpus.data
    prepare_shards(data, "train-clean-100", out, 8, None, cfg.features, cfg.train.seed, False)
    prepare_shards(data, "dev-clean", out, 4, progress=False)
    return out


def test_shards_hold_every_utterance_and_lhotse_reads_them(synthetic_corpus, shards) -> None:
    from lhotse import CutSet

    cfg = load_config(TINY)
    original = {c.id: c for c in load_cuts(synthetic_corpus.data / "train-clean-100")}
    assert (shards / "cmvn.json").read_bytes() == (synthetic_corpus.data / "cmvn.json").read_bytes()
    theirs = CutSet.from_shar(in_dir=shards / "train-clean-100")  # a third-party reader
    seen = []
    for cut in theirs:
        seen.append(cut.id)
        mine = original[cut.id]
        assert cut.supervisions[0].text == mine.supervisions[0].text
        # 16-bit FLAC of 16-bit audio: the same samples
        assert np.array_equal(cut.load_audio()[0], cut_samples(mine, 16000))
        seed = utterance_seed(cfg.train.seed, 0, cut.id, "audio")
        fbank = load_features(mine, cfg.features, (1.0,), cfg.features.dither, seed)
        stored = torch.from_numpy(cut.load_custom("fbank").astype(np.float32))
        assert torch.allclose(stored, fbank, atol=0.02)  # float16
    assert sorted(seen) == sorted(original)
    kind, ours = find_shards(Storage(str(shards)), "train-clean-100")
    assert kind == "shar" and len(ours) == 7  # 55 utterances, 8 a shard
    cut = next(read_shard(ours[0]))
    assert np.array_equal(cut_samples(cut, 16000), cut_samples(original[cut.id], 16000))
    assert load_stored_fbank(cut) is not None


def test_bad_audio_is_skipped_and_counted_when_writing(synthetic_corpus, tmp_path) -> None:
    from wenet_lite.data.shar_writer import write_shards

    cuts = list(load_cuts(synthetic_corpus.data / "dev-clean"))
    broken = tmp_path / "broken.flac"
    broken.write_bytes(b"not audio at all")
    bad = _with_source(cuts[0], "/nonexistent/x.flac")
    worse = _with_source(cuts[1], str(broken))
    result = write_shards([bad, worse, *cuts[2:]], tmp_path / "out", 100, progress=False)
    assert result.utterances == len(cuts) - 2
    assert result.skipped == {"missing audio": 1, "unreadable audio": 1}
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())


def _with_source(cut, path: str):
    from lhotse.audio import AudioSource
    from lhotse.utils import fastcopy

    rec = fastcopy(cut.recording, sources=[AudioSource("file", [0], path)])
    return fastcopy(cut, recording=rec)


def _index(ids: List[str], seconds: List[float]) -> ShardIndex:
    return ShardIndex(tuple(ids), tuple(seconds), tuple("A B" for _ in ids))


def _parts(sizes: List[int], name: str = "p") -> ShardPart:
    rng = np.random.default_rng(len(sizes))
    indexes = [
        _index([f"{name}{s}-{i}" for i in range(n)], list(rng.uniform(1, 10, n)))
        for s, n in enumerate(sizes)
    ]
    shards = tuple(Shard(audio=f"{name}{s}") for s in range(len(sizes)))
    return ShardPart(name, shards, tuple(indexes))


def _epoch(sampler_of, world: int, epoch: int) -> List[List[List[str]]]:
    """Per rank, the batches (cut ids; [] for a padding batch) of one epoch."""
    out = []
    for rank in range(world):
        sampler = sampler_of(rank)
        sampler.set_epoch(epoch)
        plans = sampler.plan(epoch)
        rows = []
        for _, stream, k in sampler:
            plan = plans[rank * sampler.streams + stream] if stream >= 0 else None
            rows.append(list(plan.batches[k]) if plan else [])
        out.append(rows)
    return out


@pytest.mark.parametrize("world,streams", [(1, 1), (2, 2), (3, 1)])
def test_every_utterance_once_an_epoch_and_ranks_take_the_same_steps(world, streams) -> None:
    part = _parts([13, 7, 20, 9, 11, 4, 16, 10])
    everything = sorted(i for index in part.indexes for i in index.ids)

    def sampler_of(rank: int) -> ShardSampler:
        return ShardSampler([part], 25.0, True, 3, world, rank, streams, 6, 5)

    orders = []
    for epoch in (1, 2):
        ranks = _epoch(sampler_of, world, epoch)
        assert len({len(r) for r in ranks}) == 1  # the same number of steps
        ids = [i for r in ranks for batch in r for i in batch]
        assert sorted(ids) == everything  # exactly once, across all ranks
        for r in ranks:
            for batch in r:
                seconds = dict(zip(sum((x.ids for x in part.indexes), ()),
                                   sum((x.seconds for x in part.indexes), ())))  # fmt: skip
                assert len(batch) <= 1 or sum(seconds[i] for i in batch) <= 25.0
        orders.append(ranks)
    assert orders[0] != orders[1]  # reshuffled each epoch
    # A stream resumed at batch k opens at the first shard it still needs, not at its first.
    plans = sampler_of(0).plan(1)
    assert any(p.first_shard[-1] > 0 for p in plans)
    assert all(list(p.first_shard) == sorted(p.first_shard) for p in plans)
    assert _epoch(sampler_of, world, 1) == orders[0]  # a pure function of (seed, epoch)


def test_mixed_shards_are_drawn_by_weight() -> None:
    big, small = _parts([30] * 10, "big"), _parts([10] * 3, "small")
    sampler = ShardSampler([big, small], 25.0, True, 0, 1, 0, 1, weights={"big": 1, "small": 1})
    drawn = Counter()
    for epoch in range(1, 21):
        for n in sampler.epoch_shards(epoch):
            drawn[sampler.shards[n][2]] += len(sampler.shards[n][1].ids)
    # each part's share is half the 330 utterances an epoch, to a shard's size
    assert abs(drawn["big"] / 20 - 165) <= 30 and abs(drawn["small"] / 20 - 165) <= 10


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_base(shards) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(shards))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _batches(synthetic_corpus, data: str, tmp: Path, workers: int = 0, epoch: int = 1,
             *sets: str) -> List[List[str]]:  # fmt: skip
    cfg = load_config(TINY, (f"data.num_workers={workers}", *sets))
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    train = load_train_data(data, ["train-clean-100"], tmp, CPU, False)
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    out = shard_loader(cfg, tokenizer, layers, train, CPU, None, False)
    out["sampler"].set_epoch(epoch)
    return [list(b.ids) for b in out["train_loader"]]


def test_loader_from_a_folder_http_and_a_pipe_sees_the_local_utterances(
    synthetic_corpus, shards, http_base, tmp_path
) -> None:
    local = sorted(c.id for c in load_cuts(synthetic_corpus.data / "train-clean-100"))
    folder = _batches(synthetic_corpus, str(shards), tmp_path)
    assert sorted(i for b in folder for i in b) == local
    workers = _batches(synthetic_corpus, str(shards), tmp_path, 2)
    assert workers != folder  # two read streams: another plan...
    assert sorted(i for b in workers for i in b) == local  # ...of the same utterances
    assert _batches(synthetic_corpus, http_base, tmp_path, 2) == workers
    assert _batches(synthetic_corpus, f"pipe:cat {shards}", tmp_path, 2) == workers
    assert _batches(synthetic_corpus, f"pipe:cat {shards}/{{}}", tmp_path) == folder
    epoch2 = _batches(synthetic_corpus, str(shards), tmp_path, 0, 2)
    assert epoch2 != folder and sorted(i for b in epoch2 for i in b) == local


def test_a_missing_shard_is_named_or_skipped_and_counted(synthetic_corpus, shards, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards, copy)
    (copy / "train-clean-100" / "recording.000002.tar").unlink()
    (copy / "train-clean-100" / "fbank.000002.tar").unlink()
    for workers in (0, 1):  # in a DataLoader worker too: one line naming the shard
        with pytest.raises(ShardError, match=r"\.000002\.tar.*skip_bad_shards") as error:
            _batches(synthetic_corpus, str(copy), tmp_path, workers)
        assert "\n" not in str(error.value) and str(error.value).startswith(str(copy))
    cfg = load_config(TINY, ("data.skip_bad_shards=true",))
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    train = load_train_data(str(copy), ["train-clean-100"], tmp_path, CPU, False)
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    out = shard_loader(cfg, tokenizer, layers, train, CPU, None, False)
    batches = list(out["train_loader"])
    lost = sum(b.skipped.get("unreadable_audio", 0) for b in batches)
    assert lost == 8 and sum(len(b.ids) for b in batches) == 55 - 8
    truncated = copy / "train-clean-100" / "recording.000003.tar"
    truncated.write_bytes(truncated.read_bytes()[:5000])
    with pytest.raises(ShardError, match=r"recording\.000003\.tar"):
        list(read_shard(find_shards(Storage(str(copy)), "train-clean-100")[1][3]))
    with pytest.raises(ShardError, match="cannot fetch it"):
        find_shards(Storage("http://127.0.0.1:9/nothing"), "train")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_last_shard_of_a_stream_is_skipped_and_counted(synthetic_corpus, shards, tmp_path,
                                                            workers) -> None:  # fmt: skip
    """The shard a read stream reads last fails: its utterances are counted, not an error."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards, copy)
    cfg = load_config(TINY, ("data.skip_bad_shards=true", f"data.num_workers={workers}"))
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    train = load_train_data(str(copy), ["train-clean-100"], tmp_path, CPU, False)
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    out = shard_loader(cfg, tokenizer, layers, train, CPU, None, False)
    sampler = out["sampler"]
    sampler.set_epoch(1)
    last = sampler.shards[sampler.plan(1)[0].shards[-1]]
    Path(last[0].cuts).unlink()  # listed, indexed, then gone
    batches = list(out["train_loader"])
    lost = sum(b.skipped.get("unreadable_audio", 0) for b in batches)
    assert lost == len(last[1].ids) > 0 and sum(len(b.ids) for b in batches) == 55 - lost


def test_stored_fbank_is_read_without_the_audio_when_no_audio_is_needed(shards, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards / "train-clean-100", copy / "p")
    (copy / "p" / "recording.000000.tar").unlink()
    first = find_shards(Storage(str(copy)), "p")[1][0]
    cuts = list(read_shard(first, audio=False))
    assert len(cuts) == 8 and all(load_stored_fbank(c) is not None for c in cuts)
    with pytest.raises(ShardError, match=r"recording\.000000\.tar"):
        list(read_shard(first))  # the audio is needed: its tar is missing


def _wenet_tars(corpus: Path, out: Path, per_tar: int) -> Path:
    """train-clean-100 as WeNet shard tars (<key>.wav + <key>.txt) and their data.list."""
    cuts = list(load_cuts(corpus / "train-clean-100"))
    (out / "train").mkdir(parents=True)
    tars = []
    for start in range(0, len(cuts), per_tar):
        path = out / f"shard_{start // per_tar:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for cut in cuts[start : start + per_tar]:
                wav = io.BytesIO()
                sf.write(wav, cut_samples(cut, 16000), 16000, format="WAV", subtype="PCM_16")
                for name, data in ((f"{cut.id}.txt", cut.supervisions[0].text.encode()),
                                   (f"{cut.id}.wav", wav.getvalue())):  # fmt: skip
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        tars.append(str(path))
    (out / "train" / "data.list").write_text("\n".join(tars) + "\n")
    (out / "cmvn.json").write_bytes((corpus / "cmvn.json").read_bytes())
    return out


def test_wenet_shard_tars_train_as_they_are(synthetic_corpus, tmp_path) -> None:
    data = _wenet_tars(synthetic_corpus.data, tmp_path / "wenet", 20)
    kind, tars = find_shards(Storage(str(data)), "train")
    assert kind == "wenet" and len(tars) == 3
    cfg = load_config(TINY, ("data.num_workers=1",))
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    train = load_train_data(str(data), ["train"], tmp_path / "exp", CPU, False)
    assert list((tmp_path / "exp" / "shard_index").glob("*.json.gz"))  # indexed once, cached
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    out = shard_loader(cfg, tokenizer, layers, train, CPU, None, False)
    ids = [i for b in out["train_loader"] for i in b.ids]
    local = sorted(c.id for c in load_cuts(synthetic_corpus.data / "train-clean-100"))
    assert sorted(ids) == local
    # the same fbank as from the original files
    dataset = ASRDataset(cfg.features, cfg.data, tokenizer, layers, 0, False)
    first = ShardDataset(out["sampler"], dataset, False)
    batch = first[next(iter(out["sampler"]))]
    originals = {c.id: c for c in load_cuts(synthetic_corpus.data / "train-clean-100")}
    from lhotse import CutSet

    alone = dataset[(1, CutSet.from_cuts([originals[i] for i in batch.ids]))]
    assert torch.equal(batch.feats, alone.feats)


def test_a_remote_part_without_shards_is_named(shards) -> None:
    with pytest.raises(ShardError, match=f"no {SHARD_LIST}"):
        find_shards(Storage(f"pipe:cat {shards}"), "nonexistent")
