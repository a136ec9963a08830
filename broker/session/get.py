"""basic.get, written once for every entry point: the wire channel, the management API's
get (``POST /api/queues/VHOST/NAME/get``) and its aliveness test, as RabbitMQ's management
plugin gets through a channel (rabbit_channel:handle_method/3, ``basic.get``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.node.message import with_header
from leveret.session.topology import lookup_queue

if TYPE_CHECKING:
    from leveret.node.auth import AccessControl
    from leveret.node.queue import Entry, Queue
    from leveret.node.vhost import VHost


def readable_queue(
    access: AccessControl, user: str, vhost: VHost, name: str, owner: object | None
) -> Queue:
    """basic.get's checks, in rabbit_channel's order: read permission (403), the queue
    (404; 405 when exclusive to another connection than ``owner``, None outside AMQP),
    then a stream's 540."""
    access.check(user, vhost.name, "read", "queue", name)
    queue = lookup_queue(vhost, name, owner)
    queue.check_get()
    return queue


def basic_get(
    access: AccessControl,
    user: str,
    vhost: VHost,
    name: str,
    no_ack: bool,
    owner: object | None,
) -> tuple[Queue, Entry | None]:
    """The checks of :func:`readable_queue`, then the head message (None: the queue is
    empty, counted as a get-empty). With ``no_ack`` false the message stays unacked in
    the queue's counters until the caller acks, rejects or requeues it
    (leveret.queue.Queue.get)."""
    queue = readable_queue(access, user, vhost, name, owner)
    return queue, queue.get(no_ack)


def delivery_header(queue: Queue, entry: Entry) -> tuple[bytes, bool]:
    """The content header and redelivered flag a client sees for ``entry``: a quorum
    queue's redelivered message carries its ``x-delivery-count`` (rabbit_fifo_client)."""
    header, redelivered = entry[0].header, entry[1]
    if redelivered and queue.quorum:
        header = with_header(header, "x-delivery-count", redelivered)
    return header, bool(redelivered)
