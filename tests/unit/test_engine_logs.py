"""Engine.logs reads a container's output in one request: the engine's multiplexed frames, taken apart here."""

from __future__ import annotations

import struct

from harness.sandbox.engine import Engine, frames


def _frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def test_frames_of_both_streams_come_out_in_order_and_a_frame_cut_short_keeps_what_arrived() -> None:
    raw = _frame(1, b"out 1\n") + _frame(2, b"err\n") + _frame(1, b"") + _frame(1, b"out 2\n")
    whole = [(1, b"out 1\n"), (2, b"err\n"), (1, b""), (1, b"out 2\n")]
    assert list(frames(raw)) == whole
    assert list(frames(raw + _frame(1, b"partial line")[:-4])) == [*whole, (1, b"partial ")]
    assert list(frames(raw + b"\x01\x00")) == whole, "half a header: nothing"
    assert list(frames(b"")) == []


class _Response:
    status_code = 200

    def __init__(self, content: bytes) -> None:
        self.content = content


class _Api:
    """docker-py's API client, as far as Engine.logs uses it; every request it is asked for is kept."""

    base_url = "http+docker://localhost"
    api_version = "1.41"
    timeout = 60

    def __init__(self, content: bytes) -> None:
        self.content = content
        self.requests: list[tuple[str, dict[str, object]]] = []
        self.api = self

    def get(self, url: str, params: dict[str, object], timeout: int) -> _Response:
        self.requests.append((url.removeprefix(f"{self.base_url}/v{self.api_version}"), params))
        return _Response(self.content)

    def inspect_container(self, name: str) -> dict[str, object]:
        raise AssertionError("logs needs no inspect: a harness container never has a TTY")


def test_one_request_per_read_and_the_cap_keeps_the_tail() -> None:
    engine = Engine.__new__(Engine)
    api = _Api(_frame(1, b"a" * 10) + _frame(2, b"b" * 10))  # the engine filters streams; this fake does not
    engine.client = api  # type: ignore[assignment]
    logs = engine.logs("c", stdout=True, stderr=False, cap=15)
    assert (logs.data, logs.truncated) == (b"a" * 5 + b"b" * 10, True)
    assert api.requests == [
        ("/containers/c/logs", {"stdout": 1, "stderr": 0, "timestamps": 0, "follow": 0, "tail": "all"})
    ]
    out, err = engine.output("c", stdout_cap=4, stderr_cap=100)
    assert (out, err) == ((b"aaaa", True), (b"b" * 10, False)), "both streams, apart, in one more request"
    assert len(api.requests) == 2 and api.requests[1][1]["stderr"] == 1
