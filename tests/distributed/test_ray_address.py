"""A Ray cluster's address that nothing answers at is refused at once (docs/scale.md, docs/service.md):
`ray.init` retries such an address for many minutes, printing only its own warnings."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from a3fast.distributed.cluster import check_reachable


@pytest.fixture
def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["{host}:{port}", "ray://{host}:{port}"])
def test_an_address_nothing_accepts_connections_at_is_a_connection_error(closed_port, form):
    address = form.format(host="127.0.0.1", port=closed_port)
    with pytest.raises(ConnectionError, match=f"nothing accepts a connection at {address} "):
        check_reachable(address)
    with pytest.raises(ConnectionError, match="nothing accepts a connection at 127.0.0.1:70000"):
        check_reachable("127.0.0.1:70000")


@pytest.mark.parametrize("address", [None, "auto", "local"])
def test_addresses_that_name_no_host_and_port_are_left_to_ray(address):
    check_reachable(address)


def test_an_open_port_is_reachable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}")


@pytest.mark.parametrize("args, words", [
    (["serve", "--stdio", "--shards", "2", "--ray-address"], "cannot start the Ray cluster at"),
    (["verify", "TRACE", "--ray"], "cannot reach the Ray cluster: nothing accepts a connection"),
])
def test_the_commands_refuse_an_unreachable_cluster_at_once(closed_port, tmp_path, args, words):
    pytest.importorskip("ray")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"seq":1,"kind":"x","content":{}}\n')
    command = [str(trace) if a == "TRACE" else a for a in args] + [f"127.0.0.1:{closed_port}"]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "a3fast", *command], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("timeout", [-2.5, -1, 0, float("nan"), float("inf"), True, "5"])
def test_a_shard_timeout_that_is_no_positive_number_is_refused_before_ray_is_asked(timeout):
    # Ray's core aborts the process on a negative wait, and reads -1 as no bound at all
    from a3fast.distributed import ShardedFleet

    with pytest.raises(ValueError, match="timeout: expected a positive number of seconds"):
        ShardedFleet(shards=2, timeout=timeout)
