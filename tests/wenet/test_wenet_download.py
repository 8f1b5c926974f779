"""`import-wenet --download`: WeNet's archives fetched from a real HTTP server on a local port
(a tar of a fixture), resumed after an interruption, checked against the checksum of the
first download, unpacked safely and imported with the table's LayerNorm epsilon."""

from __future__ import annotations

import http.server
import io
import logging
import shutil
import tarfile
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest
import torch

from wenet_lite.cli import main
from wenet_lite.files.model_file import load_model
from wenet_lite.wenet.convert import import_wenet
from wenet_lite.wenet.download import PRETRAINED, Pretrained, download_model, guess_norm_eps

CASE = Path(__file__).parents[1] / "fixtures" / "wenet" / "librispeech"
FOLDER = "20210610_u2pp_conformer_exp"


def _archive(members: Optional[dict] = None, link: Optional[str] = None) -> bytes:
    """A tar.gz of the fixture as WeNet packs its checkpoints: one dated folder (with
    ``members`` added, and a symbolic link to ``link``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(CASE.iterdir()):
            if path.name != "golden.pt":
                tar.add(path, arcname=f"{FOLDER}/{path.name}")
        for name, data in (members or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(f"{FOLDER}/link.txt")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    return buffer.getvalue()


class _Server:
    """Serves one archive at /models/<name>, honouring ``Range: bytes=N-``; ``cut_after``
    makes the next response stop after that many bytes, as a dropped connection does."""

    def __init__(self, data: bytes, name: str = f"{FOLDER}.tar.gz") -> None:
        self.data, self.name = data, name
        self.cut_after: Optional[int] = None
        self.ranges: List[Optional[str]] = []
        self.block, self.pause = len(data) or 1, 0.0
        """the body goes out ``block`` bytes at a time, ``pause`` seconds after each"""
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path != f"/models/{owner.name}":
                    self.send_error(404)
                    return
                asked = self.headers.get("Range")
                owner.ranges.append(asked)
                start = int(asked[len("bytes=") : -1]) if asked else 0
                if start >= len(owner.data):
                    self.send_error(416)
                    return
                body = owner.data[start:]
                self.send_response(206 if asked else 200)
                if asked:
                    self.send_header("Content-Range", f"bytes {start}-{len(owner.data) - 1}/"
                                     f"{len(owner.data)}")  # fmt: skip
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut, owner.cut_after = owner.cut_after, None
                body = body if cut is None else body[:cut]
                for i in range(0, len(body), owner.block):
                    self.wfile.write(body[i : i + owner.block])
                    time.sleep(owner.pause)
                if cut is not None:
                    self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/models/{self.name}"


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server(_archive())
    yield s
    s.httpd.shutdown()


def test_an_interrupted_download_resumes_and_imports_as_the_directory(server, tmp_path) -> None:
    cache = tmp_path / "cache"
    server.cut_after = 5000
    with pytest.raises(ValueError, match=r"download interrupted at 5000 of \d+ bytes; run again"):
        download_model(server.url, cache, progress=False)
    part = cache / f"{FOLDER}.tar.gz.part"
    assert part.stat().st_size == 5000 and not (cache / f"{FOLDER}.tar.gz").exists()
    model_dir = download_model(server.url, cache, progress=False)
    assert server.ranges == [None, "bytes=5000-"]  # the second request asked for the rest
    assert (cache / f"{FOLDER}.tar.gz").read_bytes() == server.data and not part.exists()
    assert model_dir == cache / FOLDER / FOLDER and (model_dir / "final.pt").is_file()
    assert download_model(server.url, cache, progress=False) == model_dir  # cached: no request
    assert len(server.ranges) == 2
    out = tmp_path / "m.pt"
    assert main(["import-wenet", "--download", server.url, "--cache", str(cache),
                 "--out", str(out)]) == 0  # fmt: skip
    direct = import_wenet(CASE, tmp_path / "direct.pt", 1e-12)
    ours, theirs = load_model(out), load_model(direct)
    assert ours[2] == theirs[2]  # the date in the folder's name chose 1e-12
    for key, value in ours[0].state_dict().items():
        assert torch.equal(value, theirs[0].state_dict()[key]), key


def test_a_name_uses_the_tables_url_and_epsilon(server, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(PRETRAINED, "librispeech", Pretrained(server.url, 1e-12, "test"))
    out = tmp_path / "m.pt"
    args = ["import-wenet", "--download", "librispeech", "--cache", str(tmp_path / "c"),
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    cfg = load_model(out)[2]
    assert cfg.encoder.norm_eps == 1e-12 and cfg.decoder.norm_eps == 1e-12
    assert main(["import-wenet", "--download", "librispeach", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no WeNet model named 'librispeach'; the names: librispeech, gigaspeech" in err
    assert main(["import-wenet", str(CASE), "--download", "librispeech", "--out", str(out)]) == 2


def test_a_changed_archive_is_refused_by_its_recorded_checksum(server, tmp_path) -> None:
    cache = tmp_path / "cache"
    download_model(server.url, cache, progress=False)
    archive = cache / f"{FOLDER}.tar.gz"
    archive.write_bytes(archive.read_bytes()[:-10] + bytes(10))
    shutil.rmtree(cache / FOLDER)
    with pytest.raises(ValueError, match=r"sha256 \w+ is not the \w+ recorded on its first"):
        download_model(server.url, cache, progress=False)


def test_two_downloads_of_one_model_at_once_take_turns(server, tmp_path) -> None:
    """Two importers of one model at once (two terminals, two jobs of a script): the second
    waits for the first and uses its archive and model; one request reaches the server, and
    neither write clobbers the other's."""
    cache = tmp_path / "cache"
    server.block, server.pause = 4096, 0.01  # a download long enough for the second to start
    got: List[object] = []

    def run() -> None:
        try:
            got.append(download_model(server.url, cache, progress=False))
        except Exception as e:  # noqa: BLE001 - the test reports whatever the race raised
            got.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == [cache / FOLDER / FOLDER] * 2, got
    assert server.ranges == [None]  # one whole download, no second or resumed request
    assert (cache / f"{FOLDER}.tar.gz").read_bytes() == server.data
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [FOLDER, f"{FOLDER}.tar.gz", f"{FOLDER}.tar.gz.lock", "sha256.json"]
    )


@pytest.mark.parametrize("where", ["parent", "absolute", "link"])
def test_nothing_unpacks_outside_the_cache(tmp_path, where: str) -> None:
    """A member ``../x``, an absolute one or a link is refused, and nothing is unpacked: one
    rule on every Python, whatever its tarfile's extraction filters do."""
    target = tmp_path / "evil.txt"
    name = {"parent": "../../evil.txt", "absolute": str(target)}.get(where)
    members = {name: b"owned"} if name else {}
    s = _Server(_archive(members, link="/etc/passwd" if where == "link" else None))
    cache = tmp_path / "cache"
    try:
        with pytest.raises(ValueError, match="refused member"):
            download_model(s.url, cache, progress=False)
    finally:
        s.httpd.shutdown()
    assert not target.exists() and not list(cache.rglob("final.pt"))


def test_failures_are_one_line(tmp_path, capsys) -> None:
    s = _Server(b"not a tar at all")
    try:
        out = tmp_path / "m.pt"
        missing = s.url.replace(s.name, "other.tar.gz")
        assert main(["import-wenet", "--download", missing, "--out", str(out)]) == 1
        assert "download failed (HTTP 404" in capsys.readouterr().err
        assert main(["import-wenet", "--download", s.url, "--cache", str(tmp_path / "c"),
                     "--out", str(out)]) == 1  # fmt: skip
        err = capsys.readouterr().err
        assert "not an archive that unpacks" in err and err.count("\n") == 1
    finally:
        s.httpd.shutdown()


def test_the_epsilon_without_a_table_entry(tmp_path, caplog) -> None:
    """The newer train.yaml layout says 1e-5; a date in the folder's name says which side of
    2022-01-11; no evidence is a warned guess of 1e-5."""
    assert guess_norm_eps(tmp_path / "x", {"cmvn_conf": {}})[::2] == (1e-5, True)
    assert guess_norm_eps(tmp_path / "20211201_exp", {})[::2] == (1e-12, True)
    assert guess_norm_eps(tmp_path / "20220506_exp", {})[::2] == (1e-5, True)
    assert guess_norm_eps(tmp_path / "exp", {})[::2] == (1e-5, False)
    with caplog.at_level(logging.WARNING):
        cfg = load_model(import_wenet(CASE, tmp_path / "m.pt"))[2]
    assert cfg.encoder.norm_eps == 1e-5
    assert any("is a guess" in r.getMessage() and "--norm-eps 1e-12" in r.getMessage()
               for r in caplog.records)  # fmt: skip
