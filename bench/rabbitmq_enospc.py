"""RabbitMQ on a truly full disk (RELIABILITY.md, "disk full: ENOSPC"): persistent 64 KiB
messages with publisher confirms into a durable queue until the broker refuses one.

How it was run (2026-11-29): a 24 MiB tmpfs as the private node's data and log directory,
``disk_free_limit`` 1 byte so the alarm never blocks first::

    mount -t tmpfs -o size=24m tmpfs /mnt/enospc
    TMPDIR=/mnt/enospc bench/rabbitmq_node.sh start leveret-enospc@localhost 5762 25762
    rabbitmqctl -n leveret-enospc@localhost set_disk_free_limit 1
    .venv/bin/python bench/rabbitmq_enospc.py amqp://guest:guest@127.0.0.1:5762/

It prints one JSON line: the confirmed count and how publishing ended. Then look at the
node (``rabbitmqctl -n ... list_queues``) and its log.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pika
import pika.exceptions


def main(url: str) -> None:
    """Publish until the broker refuses, then print what happened."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("full", durable=True)
    body = os.urandom(64 * 1024)
    confirmed, ended = 0, "no refusal"
    try:
        while True:
            channel.basic_publish("", "full", body, pika.BasicProperties(delivery_mode=2))
            confirmed += 1
    except (pika.exceptions.AMQPError, OSError) as exc:
        ended = f"{type(exc).__name__}: {exc}"[:300]
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "confirmed": confirmed,
                "ended": ended,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "amqp://guest:guest@127.0.0.1:5762/")
