"""The cold start benchmark's parts that need no engine: the bandwidth cap (a real proxy on
127.0.0.1 between two real sockets), its parsing, the registry's access log read for the bytes it
sent, and the JSON rows' keys as issue 37 names them."""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import asdict

import pytest

from benchmarks.coldstart import Registry, Row, goals, table
from triton_standins.nodes import BandwidthProxy, parse_bandwidth

ISSUE_KEYS = ("selection", "build", "compression", "runtime", "node", "bandwidth", "download_s", "unpack_s", "ready_s",
              "first_answer_s", "total_s", "bytes_moved", "served")


def test_bandwidths_parse_and_a_bad_one_names_the_form():
    assert parse_bandwidth("none") is None
    assert parse_bandwidth("1gbit") == pytest.approx(125e6)
    assert parse_bandwidth("10Gbit") == pytest.approx(1.25e9)
    assert parse_bandwidth("500mbit") == pytest.approx(62.5e6)
    for bad in ("fast", "0gbit", "-1gbit", "1gb", ""):
        with pytest.raises(ValueError, match="1gbit"):
            parse_bandwidth(bad)


def _sink(total: int) -> tuple[int, dict]:
    """A server on 127.0.0.1 that sends `total` bytes to whoever connects; its port."""
    server = socket.create_server(("127.0.0.1", 0))
    payload = os.urandom(1 << 16)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            left = total
            while left:
                left -= conn.send(payload[: min(left, len(payload))])
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], {"payload": payload}


def _receive(port: int, total: int) -> tuple[int, float]:
    started = time.monotonic()
    got = 0
    with socket.create_connection(("127.0.0.1", port)) as conn:
        while got < total:
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
    return got, time.monotonic() - started


def test_the_proxy_caps_the_rate_and_moves_every_byte():
    total = 8 << 20  # 8 MiB at 40 Mbit/s: about 1.7 s
    port, _ = _sink(total)
    with BandwidthProxy(("127.0.0.1", port), parse_bandwidth("40mbit")) as proxy:
        got, seconds = _receive(proxy.port, total)
    assert got == total
    assert seconds >= 0.9 * total / 5e6, seconds  # not faster than the cap
    assert seconds < 6, seconds


def test_the_uncapped_proxy_relays_fast():
    total = 64 << 20
    port, _ = _sink(total)
    with BandwidthProxy(("127.0.0.1", port), None) as proxy:
        got, seconds = _receive(proxy.port, total)
    assert got == total and seconds < 5, seconds


def test_bytes_moved_are_the_gets_the_registry_answered(tmp_path):
    registry = Registry(tmp_path, None)
    registry.log.write_text(
        '127.0.0.1 - - [25/Nov/2026:18:49:59 +0000] "PUT /v2/x/blobs/uploads/1 HTTP/1.1" 201 0 "" "skopeo"\n')
    offset = registry.log_offset()
    with open(registry.log, "a") as log:
        log.write('127.0.0.1 - - [d] "GET /v2/x/manifests/1 HTTP/1.1" 200 1200 "" "containerd/1.6.20"\n'
                  '127.0.0.1 - - [d] "HEAD /v2/x/manifests/1 HTTP/1.1" 200 1200 "" "containerd/1.6.20"\n'
                  '127.0.0.1 - - [d] "GET /v2/x/blobs/sha256:ab HTTP/1.1" 200 5000000 "" "containerd/1.6.20"\n'
                  '127.0.0.1 - - [d] "GET /v2/x/blobs/sha256:cd HTTP/1.1" 404 90 "" "containerd/1.6.20"\n'
                  'time="..." level=info msg="response completed" http.response.written=5000000\n')
    assert registry.sent_since(offset) == 5001200


def test_rows_carry_the_issues_keys():
    row = Row("onnxruntime+python", "pruned", "zstd", "containerd", "empty", "none")
    keys = tuple(asdict(row))
    assert keys[: len(ISSUE_KEYS)] == ISSUE_KEYS
    assert row.served is False  # served only once an answer was checked


def test_goals_are_read_from_measured_rows_only():
    def row(build, compression, total, download, unpack, node="empty", bandwidth="none", served=True, moved=None,
            size=None, selection="onnxruntime+python", pull="apart"):
        return Row(selection, build, compression, "containerd", node, bandwidth, download, unpack, 1.0, 0.1, total,
                   moved, served, image_size=size, pull="file" if bandwidth == "file" else pull)

    rows = [row("composepy", "gzip", 100.0, 60, 38), row("pruned", "gzip", 40.0, 20, 18),
            row("pruned", "zstd", 20.0, 9, 9), row("pruned", "none", 16.0, 6, 8, bandwidth="file"),
            row("pruned", "gzip", 9.0, 3, 4, node="onnxruntime+python pruned", moved=1_000, size=4_000,
                selection="pytorch+python")]
    text = "\n".join(goals(rows))
    assert "pruned zstd / compose.py-style gzip, time to first answer: 0.20x (goal <= 0.25x: met)" in text
    assert "pruned zstd / the floor (uncompressed from a local file, 16.0 s): 1.25x (goal <= 1.3x: met)" in text
    assert "pull, gzip / zstd: 2.11x faster with zstd (goal >= 1.5x: met)" in text
    # An uncompressed pull whose unpack and start alone take less than the import: that is the floor.
    text = "\n".join(goals(rows + [row("pruned", "none", 30.0, 20, 8.9)]))
    assert "pruned zstd / the floor (uncompressed layers already on the node: unpack and start, 10.0 s): 2.00x " \
           "(goal <= 1.3x: NOT met)" in text
    # A pull that unpacks layers as they arrive: its own line against the same floor.
    text = "\n".join(goals(rows + [row("pruned", "zstd", 12.0, 9, 1.9, pull="together")]))
    assert "pruned zstd, pulled as one (layers unpacked as they arrive) / the floor (uncompressed from a local " \
           "file, 16.0 s): 0.75x (goal <= 1.3x: met)" in text
    assert text.count("pull, gzip / zstd") == 1  # read from the rows pulled apart
    assert "moved 0.25x its size (goal <= 0.5x: met)" in text
    # A row that did not serve gives no figure.
    rows[2] = row("pruned", "zstd", 20.0, 9, 9, served=False)
    assert "zstd" not in "\n".join(goals(rows))


def test_the_proxy_counts_the_bytes_it_relayed():
    total = 16 << 20
    port, _ = _sink(total)
    with BandwidthProxy(("127.0.0.1", port), None) as proxy:
        assert proxy.moved() == (0, 0)
        got, _ = _receive(proxy.port, total)
        # A chunk is counted right after it was handed on: the client may hold it a moment before.
        deadline = time.monotonic() + 5
        while (moved := proxy.moved())[0] < total and time.monotonic() < deadline:
            time.sleep(0.01)
        down, up = moved
    assert got == total and down == total, (got, down)
    assert up == 0


def test_lazy_rows_give_their_goals_the_floor_and_the_bytes_before_the_answer():
    def row(build, compression, runtime, total, download, unpack, bandwidth="none", pull="apart", **more):
        return Row("onnxruntime+python", build, compression, runtime, "empty", bandwidth, download, unpack, 1.0, 0.1,
                   total, 1_000, True, pull=pull, **more)

    layers = [{"digest": "sha256:a", "size": 600, "done_s": None}, {"digest": "sha256:b", "size": 400, "done_s": None}]
    rows = [row("composepy", "gzip", "containerd", 200.0, 60, 138), row("pruned", "gzip", "containerd", 60.0, 10, 48),
            row("pruned", "estargz", "containerd", 65.0, 10, 53.4),
            row("pruned", "gzip", "containerd2", 50.0, 10, 38), row("pruned", "gzip", "containerd2", 49.0, 9, 38.9,
                                                                   pull="together"),
            row("pruned", "estargz", "containerd-stargz", 6.0, 3, None, pull="lazy", bytes_first=200, bytes_total=1_000,
                floor_s=4.0, restart_s=2.0, prefetch_bytes=180, floor_rate=90.0, layers=layers),
            row("pruned", "estargz", "containerd-stargz", 20.0, 15, None, bandwidth="1gbit", pull="lazy",
                bytes_first=300, layers=layers)]
    text = "\n".join(goals(rows))
    assert "[none] pull on containerd 1.6 (no lazy pull), estargz / gzip: 63.4 / 58.0 s = 1.09x (goal <= 1.15x: met)" \
        in text
    assert "containerd2, pruned gzip: fetch then unpack 10.0 + 38.0 s; one pull 47.9 s, 38.9 s of it after the last " \
           "byte (download and unpack overlap no)" in text
    assert "[none] empty stargz node to the first answer, pruned estargz: 6.0 s (goal <= 8 s: met)" in text
    assert "compose.py-style image on a containerd node (200.0 s): 0.030x (goal <= 0.05x: met)" in text
    assert "= 4.0 s): 1.50x (goal <= 2x: met)" in text
    assert "moved before the first answer 200 B of the image's 1.0 KB compressed: 0.20x (goal <= 0.25x: met)" in text
    assert "[1gbit] empty stargz node to the first answer, pruned estargz: 20.0 s (goal <= 15 s: NOT met)" in text
    assert "0.30x (goal <= 0.25x: NOT met)" in text
    assert "| containerd-stargz | empty | none | 3.0 | - |" in table(rows)
