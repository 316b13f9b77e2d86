"""The one lines a run on several hosts fails with, from what torch, gloo, pdsh and DeepSpeed print (their texts as
the two-host tests saw them)."""

from training.engine import failure_reason, unreachable_line
from training.launcher import host_failures

RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.253.0.2]:44246: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application."
)
CLOSED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[10.253.0.2]:15531. This is typically caused by a remote worker crashing. GLHF!"
)


def test_a_lost_peer_is_its_host_and_what_happened():
    assert failure_reason(RuntimeError(RESET)) == (
        "lost the rank on 10.253.0.2: Read error Connection reset by peer (its host went down, or its process died)"
    )
    assert failure_reason(RuntimeError(CLOSED)).startswith("lost the rank on 10.253.0.2: Connection closed by peer")
    # anything else keeps its type and first line
    assert failure_reason(ValueError("bad value\nmore")) == "ValueError: bad value"
    assert failure_reason(KeyboardInterrupt()) == "KeyboardInterrupt"


def test_ranks_that_never_met_name_the_master_and_the_wait():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.253.0.1", "MASTER_PORT": "29500"}
    line = unreachable_line(env, 10.0)
    assert line.startswith("rank 0 of 2 waited 10 s for the other ranks through the master at 10.253.0.1:29500")
    assert "RLHF_CONNECT_TIMEOUT" in line and "\n" not in line


def test_the_launchers_log_names_each_host_it_could_not_reach_once():
    log = (
        "10.253.0.3: ssh: connect to host 10.253.0.3 port 22: No route to host\n"
        "pdsh@head: 10.253.0.3: ssh exited with exit code 255\n"
        "pdsh@head: 10.253.0.1: ssh exited with exit code 1\n"
        "RuntimeError: Using hostfile at /h but host=node-9 was not reachable via ssh. If you are running\n"
    )
    assert host_failures(log) == [
        "10.253.0.3: No route to host",
        "10.253.0.1: its ranks exited with code 1",
        "node-9: not reachable via ssh",
    ]
    assert host_failures("all well\n") == []
