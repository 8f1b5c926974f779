"""Opening data where it lives: a folder, http(s) and a ``pipe:`` command; a remote stream that
stalls (a server sending a byte now and then, a command that never ends) is a ShardError naming
it within the stall window, not a job that waits for ever."""

from __future__ import annotations

import http.server
import threading
import time
from typing import Iterator

import pytest

from wenet_lite.data import storage
from wenet_lite.data.storage import NotThere, ShardError, open_location, read_bytes


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Declares 1 MB, then sends a byte every 0.3 s (/slow) or all of it at once (/fast)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 20))
        self.end_headers()
        try:
            if self.path == "/fast":
                self.wfile.write(b"x" * (1 << 20))
                return
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.3)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def trickle() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def short_window(monkeypatch) -> float:
    monkeypatch.setattr(storage, "STALL_SECONDS", 1.5)
    return 1.5


def test_a_trickling_server_is_named_as_stalled(trickle, short_window) -> None:
    start = time.monotonic()
    with pytest.raises(ShardError, match=rf"{trickle}/slow: stalled \(\d+ bytes in the last 1.5 s"):
        read_bytes(f"{trickle}/slow")
    assert time.monotonic() - start < 3 * short_window
    assert read_bytes(f"{trickle}/fast") == b"x" * (1 << 20)  # a moving stream is read whole


def test_a_command_that_hangs_is_named_and_ended(short_window, tmp_path) -> None:
    start = time.monotonic()
    with pytest.raises(ShardError, match="pipe:sleep 1000: stalled"):
        read_bytes("pipe:sleep 1000")
    assert time.monotonic() - start < 3 * short_window
    # a command that works, and one that fails, are told apart
    (tmp_path / "f").write_bytes(b"abc" * 100_000)
    assert read_bytes(f"pipe:cat {tmp_path / 'f'}") == b"abc" * 100_000
    with pytest.raises(NotThere, match=r"exited with 1 \(.*No such file"):
        read_bytes(f"pipe:cat {tmp_path / 'nothing'}")


def test_without_the_watch_a_trickle_would_keep_the_reader_waiting(trickle, short_window):
    """Negative control: a plain socket read of the same server gets its bytes in time (no
    single read times out), so only the window catches it."""
    import urllib.request

    with urllib.request.urlopen(f"{trickle}/slow", timeout=short_window) as response:
        got, start = b"", time.monotonic()
        while time.monotonic() - start < 2 * short_window:
            got += response.read(1)
    assert len(got) >= 3  # still being fed after two windows: no timeout fired


def test_a_local_file_opens_as_it_is(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"data")
    with open_location(str(tmp_path / "a")) as f:
        assert f.read() == b"data"
    with pytest.raises(NotThere, match="cannot open it"):
        read_bytes(str(tmp_path / "b"))


def test_a_part_whose_list_cannot_be_fetched_says_why(tmp_path) -> None:
    """`pipe:false` failed before: the message said only that no list was there."""
    from wenet_lite.data.shards import find_shards
    from wenet_lite.data.storage import Storage

    with pytest.raises(ShardError, match=r"no cuts.shards.json .* \(pipe:false/.*exited with 1"):
        find_shards(Storage("pipe:false"), "train")
