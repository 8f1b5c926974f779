"""An upload's ``multipart/form-data`` body, parsed as it arrives by ``python-multipart``: the
``file`` field's bytes go straight to a temporary file (nothing the size of the upload is held
in memory), the other fields (a model name, a format, a prompt: small) to memory."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Dict, List, Optional

from python_multipart.exceptions import ParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from wenet_lite.serve.http_front import BodyError

__all__ = ["FIELDS_LIMIT", "UploadForm"]

FIELDS_LIMIT = 1 << 20
"""bytes all fields but the file may hold together"""


MAX_BOUNDARY = 70
"""bytes of a multipart boundary (RFC 2046's limit; longer ones are refused with 400)"""


class UploadForm:
    """A :class:`~wenet_lite.serve.http_front.BodySink` for one request's form: ``fields``
    (name -> values), ``filename`` and ``path`` (the spooled file, None when the form had no
    ``file`` field) once finished. The file is removed when the request ends, unless
    :meth:`take` handed it on."""

    def __init__(self, content_type: str) -> None:
        kind, params = parse_options_header(content_type)
        boundary = params.get(b"boundary")
        if kind != b"multipart/form-data" or not boundary:
            raise BodyError(400, "send multipart/form-data with a 'file' field (as the openai "
                            "clients and `curl -F file=@audio.wav` do)")  # fmt: skip
        if len(boundary) > MAX_BOUNDARY:
            raise BodyError(400, f"a multipart boundary of {len(boundary)} bytes: at most "
                            f"{MAX_BOUNDARY} (RFC 2046)")  # fmt: skip
        self.fields: Dict[str, List[str]] = {}
        self.filename = "upload"
        self.path: Optional[str] = None
        self._file: Optional[IO[bytes]] = None
        self._taken = False
        self._ended = False
        self._header = (bytearray(), bytearray())
        self._headers: Dict[bytes, bytes] = {}
        self._name: Optional[str] = None  # the part being read; "file" goes to the file
        self._value = bytearray()
        self._field_bytes = 0
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": lambda d, s, e: self._header[0].extend(d[s:e]),
                "on_header_value": lambda d, s, e: self._header[1].extend(d[s:e]),
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
                "on_end": self._end,
            },  # type: ignore[arg-type]
        )

    # --- BodySink ------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        try:
            self._parser.write(data)
        except ParseError as e:
            raise BodyError(400, f"a malformed multipart body: {e}") from None

    def finish(self) -> None:
        if not self._ended:
            raise BodyError(400, "the multipart body is cut off (no closing boundary)")
        if self._file is not None:
            self._file.close()

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
        if self.path is not None and not self._taken:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    # --- the form ------------------------------------------------------------------------------

    def one(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The last value of field ``name``."""
        values = self.fields.get(name)
        return values[-1] if values else default

    def take(self) -> str:
        """The spooled file's path, now the caller's to remove."""
        assert self.path is not None
        self._taken = True
        return self.path

    # --- python-multipart's callbacks ------------------------------------------------------------

    def _part_begin(self) -> None:
        self._headers, self._name, self._value = {}, None, bytearray()

    def _header_end(self) -> None:
        name, value = self._header
        self._headers[bytes(name).lower()] = bytes(value)
        self._header = (bytearray(), bytearray())

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", errors="replace")
        if self._name != "file":
            return
        if self._file is not None:
            raise BodyError(400, "more than one 'file' field")
        given = options.get(b"filename", b"").decode("utf-8", errors="replace")
        self.filename = os.path.basename(given) or "upload"
        try:
            self._file = tempfile.NamedTemporaryFile(prefix="wenet-lite-upload-", delete=False)
        except OSError as e:  # a full or read-only temporary folder: this request fails
            raise BodyError(503, f"cannot store the upload now ({e.strerror})") from None
        self.path = self._file.name

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._name == "file":
            assert self._file is not None
            try:
                self._file.write(data[start:end])
            except OSError as e:  # a full disk: this request fails, the server goes on
                raise BodyError(503, f"cannot store the upload now ({e.strerror})") from None
            return
        self._field_bytes += end - start
        if self._field_bytes > FIELDS_LIMIT:
            raise BodyError(413, f"the form's fields other than 'file' are over {FIELDS_LIMIT} "
                            "bytes")  # fmt: skip
        self._value.extend(data[start:end])

    def _part_end(self) -> None:
        if self._name and self._name != "file":
            text = bytes(self._value).decode("utf-8", errors="replace")
            self.fields.setdefault(self._name, []).append(text)

    def _end(self) -> None:
        self._ended = True
