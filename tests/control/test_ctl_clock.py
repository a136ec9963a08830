"""``leveret ctl advance_clock -p VHOST SECONDS``: a vhost's virtual clock from the command
line, against a real broker process, with pika as the client whose message expires."""

from __future__ import annotations

import pika

from .conftest import Node


def test_advance_clock_fires_what_comes_due(node: Node) -> None:
    assert node.ctl("add_vhost", "clocked").returncode == 0
    assert node.ctl("set_permissions", "-p", "clocked", "guest", ".*", ".*", ".*").returncode == 0
    try:
        with pika.BlockingConnection(pika.URLParameters(node.url(vhost="clocked"))) as conn:
            channel = conn.channel()
            channel.queue_declare("dead")
            channel.queue_bind("dead", "amq.fanout")
            arguments = {"x-message-ttl": 3_600_000, "x-dead-letter-exchange": "amq.fanout"}
            channel.queue_declare("work", arguments=arguments)
            frozen = node.ctl("advance_clock", "-p", "clocked", "0")  # freezes it
            assert frozen.returncode == 0, frozen.stderr
            assert frozen.stdout == (
                "Advancing the clock of vhost 'clocked' by 0 s ...\nFired 0 timers\n"
            )
            channel.basic_publish("", "work", b"an hour later")
            channel.queue_declare("work", passive=True)  # a round trip: it is queued

            early = node.ctl("advance_clock", "-p", "clocked", "3599", "-q")
            assert (early.returncode, early.stdout) == (0, "Fired 0 timers\n")
            assert channel.basic_get("dead", auto_ack=True)[2] is None

            due = node.ctl("advance_clock", "-p", "clocked", "1.5", "-q")
            assert (due.returncode, due.stdout) == (0, "Fired 1 timer\n")
            assert channel.basic_get("dead", auto_ack=True)[2] == b"an hour later"
    finally:
        node.ctl("delete_vhost", "clocked")


def test_bad_arguments_are_one_line_and_a_status(node: Node) -> None:
    negative = node.ctl("advance_clock", "-p", "/", "-1")
    assert (negative.returncode, negative.stderr) == (
        64,
        "leveret: error: SECONDS must be a number >= 0, not '-1'\n",
    )
    word = node.ctl("advance_clock", "-p", "/", "soon")
    assert (word.returncode, word.stderr) == (
        64,
        "leveret: error: SECONDS must be a number >= 0, not 'soon'\n",
    )
    missing = node.ctl("advance_clock", "-p", "nowhere", "1")
    assert (missing.returncode, missing.stderr) == (
        65,
        "leveret: error: Virtual host 'nowhere' does not exist\n",
    )
    absent = node.ctl("advance_clock")
    assert (absent.returncode, absent.stderr) == (
        64,  # rabbitmqctl's usage status, as for every command's missing positional
        "leveret: error: the following arguments are required: seconds\n",
    )
    assert node.diagnostics("-q", "ping").returncode == 0  # nothing broke
