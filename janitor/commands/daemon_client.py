"""The guard's way to the daemon: HTTP/1.1 on its Unix socket, with JSON bodies.

The guarded ffmpeg asks the daemon for every call it reserves, on the path of every alignment
group, so this client costs next to nothing to import: no ``socket`` (enum, selectors), no
``json`` (re), no ``http.client``, no module of janitor. :func:`dumps` and :func:`loads` write
and read the JSON the daemon speaks (compact, UTF-8), and agree with the ``json`` module: each
reads what the other writes.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DaemonClient", "dumps", "loads"]


class DaemonClient:
    """A minimal HTTP/1.1 client on the daemon's Unix socket: one connection, JSON bodies.

    Hand-written on purpose, on ``_socket`` with a small JSON reader: socket (enum, selectors),
    json (re) and http.client would cost the guard more start-up than the whole request takes.
    """

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path = path
        self.timeout = timeout
        self._connect()

    def _connect(self) -> None:
        import _socket

        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        try:
            self.sock.connect(self.path)
        except OSError:
            self.sock.close()
            raise
        self._buf = b""
        self._unread = 0

    def send(self, method: str, url: str, body: Any = None) -> None:
        """Send a request without waiting for its answer (read, and dropped, by the next call)."""
        data = b"" if body is None else dumps(body).encode()
        head = (
            f"{method} {url} HTTP/1.1\r\nhost: janitor\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        ).encode()
        self.sock.sendall(head + data)
        self._unread += 1

    def call(
        self, method: str, url: str, body: Any = None, *, timeout: float | None = None
    ) -> tuple[int, Any]:
        """Send a request and read its answer: (HTTP status, the JSON body read, or None).

        ``timeout``: how long this one answer may take (a wait for room, bounded by its call's
        deadline); a broken or late answer then raises OSError, never asked again."""
        if timeout is not None:
            self.sock.settimeout(max(timeout, 0.001))
        try:
            self.send(method, url, body)
            while self._unread > 1:
                self._response()
            status, payload = self._response()
        except OSError:
            if timeout is not None:
                raise
            # The daemon closes an idle connection (keep-alive ends) while a long ffmpeg runs:
            # ask again on a new one. Only reads and idempotent ends come this late.
            self.close()
            self._connect()
            self.send(method, url, body)
            status, payload = self._response()
        finally:
            if timeout is not None:
                self.sock.settimeout(self.timeout)
        return status, loads(payload) if payload else None

    def _response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self._buf:
            self._recv()
        header, _, self._buf = self._buf.partition(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(self._buf) < length:
            self._recv()
        payload, self._buf = self._buf[:length], self._buf[length:]
        self._unread -= 1
        return status, payload

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("the daemon closed the connection")
        self._buf += chunk

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()


def dumps(obj: Any) -> str:
    """JSON text of dicts, lists, tuples, strings, numbers, booleans and None, compact (no
    spaces) and not ASCII-escaped; ValueError for NaN, infinities and text that is not valid
    UTF-8, TypeError for any other type."""
    if obj is None:
        return "null"
    if obj is True or obj is False:
        return "true" if obj else "false"
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise ValueError(f"{obj!r} is not a JSON number")
        return float.__repr__(obj)
    if isinstance(obj, str):
        out = []
        for ch in obj:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ch < " ":
                out.append(f"\\u{ord(ch):04x}")
            elif "\ud800" <= ch <= "\udfff":  # a surrogate-escaped byte: not valid UTF-8
                raise ValueError(f"{obj!r} is not valid text")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(obj, dict):
        return "{" + ",".join(f"{dumps(str(k))}:{dumps(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def loads(data: bytes) -> Any:
    """The value of a JSON document (what the daemon answers), read without ``json``/``re``;
    ValueError for a truncated, broken or trailing document."""
    text = data.decode()
    try:
        value, end = _value(text, _skip(text, 0))
    except (IndexError, KeyError):
        raise ValueError("truncated or broken JSON") from None
    if _skip(text, end) != len(text):
        raise ValueError("trailing data after JSON")
    return value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _value(text: str, i: int) -> tuple[Any, int]:
    ch = text[i]
    if ch == "{":
        obj: dict[str, Any] = {}
        i = _skip(text, i + 1)
        if text[i] == "}":
            return obj, i + 1
        while True:
            key, i = _value(text, i)
            i = _skip(text, i)
            if text[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            obj[key], i = _value(text, _skip(text, i + 1))
            i = _skip(text, i)
            if text[i] == "}":
                return obj, i + 1
            if text[i] != ",":
                raise ValueError(f"expected ',' at {i}")
            i = _skip(text, i + 1)
    if ch == "[":
        arr: list[Any] = []
        i = _skip(text, i + 1)
        if text[i] == "]":
            return arr, i + 1
        while True:
            item, i = _value(text, i)
            arr.append(item)
            i = _skip(text, i)
            if text[i] == "]":
                return arr, i + 1
            if text[i] != ",":
                raise ValueError(f"expected ',' at {i}")
            i = _skip(text, i + 1)
    if ch == '"':
        out = []
        i += 1
        while True:
            j = i
            while text[j] not in '"\\':
                j += 1
            out.append(text[i:j])
            if text[j] == '"':
                return "".join(out), j + 1
            esc = text[j + 1]
            if esc == "u":
                code = int(text[j + 2 : j + 6], 16)
                i = j + 6
                if 0xD800 <= code < 0xDC00 and text[i : i + 2] == "\\u":
                    low = int(text[i + 2 : i + 6], 16)
                    if 0xDC00 <= low < 0xE000:
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                out.append(chr(code))
            else:
                out.append(_ESCAPES[esc])
                i = j + 2
    for word, val in (("true", True), ("false", False), ("null", None)):
        if text.startswith(word, i):
            return val, i + len(word)
    j = i
    while j < len(text) and text[j] in "+-0123456789.eE":
        j += 1
    number = text[i:j]
    if not number:
        raise ValueError(f"unexpected {ch!r} at {i}")
    return (float(number) if any(c in number for c in ".eE") else int(number)), j
