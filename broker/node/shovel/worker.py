"""One running dynamic shovel: an AMQP 0-9-1 client inside the node (aiormq) that
consumes from its source and publishes to its destination, as rabbit_amqp091_shovel does.

Guarantees, as https://www.rabbitmq.com/shovel.html documents them:

- ``on-confirm``: the destination channel is in confirm mode and a message is acked at
  the source only once the destination confirmed it; a nack from the destination nacks
  (requeues) it at the source. A kill -9 of either side loses nothing; messages that were
  in flight come again (duplicates, as RabbitMQ warns).
- ``on-publish``: acked at the source once it is written to the destination.
- ``no-ack``: the source delivers without acks (fastest, may lose messages in flight).

A failure (a refused login, an unreachable host, a closed channel) ends the session: the
shovel is ``terminated`` with the reason, and after ``reconnect-delay`` seconds it starts
again (``starting``), trying its URIs in order. ``src-delete-after`` ``queue-length``
moves the messages the source queue held when the shovel started, a number moves that
many, and then the shovel removes itself (its runtime parameter is cleared).

The local end (``amqp://`` without a host) connects over loopback to the node's own AMQP
listener, as the user who defined the shovel, with a credential only this process knows
(:attr:`leveret.node.auth.AccessControl.direct_secret`): RabbitMQ's direct connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import aiormq
from aiormq.abc import ChannelFrame, DeliveredMessage
from pamqp import commands as spec
from pamqp.header import ContentHeader
from yarl import URL

from leveret.config import NODE_NAME
from leveret.node.shovel.definition import ShovelDefinition
from leveret.node.shovel.uri import ShovelURI

if TYPE_CHECKING:
    from leveret.node.shovel.registry import Shovels

log = logging.getLogger(__name__)

SHOVELLED_HEADER = "x-shovelled"
TIMESTAMP_HEADER = "x-shovelled-timestamp"
MAX_PREFETCH = 65535  # basic.qos' prefetch-count is a short
CLOSE_TIMEOUT = 2.0  # seconds a connection's Close may wait for its Close-Ok


class ShovelRunError(Exception):
    """What ended a shovel's session, in words for its status' ``reason``."""


def _describe(exc: BaseException) -> str:
    """A failure as the status' ``reason``: the broker's close text when there is one."""
    if isinstance(exc, ShovelRunError):
        return str(exc)
    if isinstance(exc, aiormq.exceptions.ChannelClosed | aiormq.exceptions.ConnectionClosed):
        code, text = (*exc.args, None, None)[:2]
        return f"{code} {text}" if text else str(exc)
    if isinstance(exc, aiormq.exceptions.ProbableAuthenticationError):
        return "ACCESS_REFUSED - login refused (probable authentication failure)"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Shovel:
    """A dynamic shovel: its definition, its state, and the task that runs it."""

    def __init__(
        self,
        vhost: str,
        name: str,
        definition: ShovelDefinition,
        owner: str,
        local: Shovels,
        on_finished: Callable[[Shovel], None],
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.definition = definition
        self.owner = owner  # the user a local end connects as
        self._local = local
        self._on_finished = on_finished
        self.state = "starting"
        self.reason: str | None = None
        self.changed = time.time()  # when the state last changed (status' timestamp)
        self.src_uri: ShovelURI | None = None  # the URIs of the running session
        self.dest_uri: ShovelURI | None = None
        self._task: asyncio.Task[None] | None = None

    def cancel(self) -> asyncio.Task[None] | None:
        """Stop it without waiting: its task unwinds and closes its connections; the
        task, to await when that must be over (None: it was not running)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return task

    def start(self) -> None:
        """Run it (on the running loop) until :meth:`stop`."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"shovel {self.vhost}/{self.name}"
            )

    async def stop(self) -> None:
        """Stop it and close its connections."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _set(self, state: str, reason: str | None = None) -> None:
        self.state, self.reason, self.changed = state, reason, time.time()

    async def _run(self) -> None:
        while True:
            try:
                finished = await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure is the shovel's reason
                reason = _describe(exc)
                log.warning("shovel %s/%s terminated: %s", self.vhost, self.name, reason)
                self._set("terminated", reason)
                await asyncio.sleep(max(self.definition.reconnect_delay, 0.0))
                self._set("starting")
                continue
            if finished:
                log.info("shovel %s/%s moved its messages and is removed", self.vhost, self.name)
                self._on_finished(self)
                return

    async def _connect(self, uris: tuple[ShovelURI, ...], end: str) -> tuple[Any, ShovelURI]:
        """The first of ``uris`` that accepts a connection (RabbitMQ tries them in turn)."""
        if not uris:
            raise ShovelRunError(f"no {end} URI to connect to")
        failure: BaseException | None = None
        for uri in uris:
            try:
                return await self._open(uri), uri
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - try the next URI
                failure = exc
                log.warning(
                    "shovel %s/%s could not connect to %s: %s",
                    self.vhost,
                    self.name,
                    uri.redacted(),
                    _describe(exc),
                )
        assert failure is not None
        raise ShovelRunError(f"could not connect to {end}: {_describe(failure)}") from failure

    async def _open(self, uri: ShovelURI) -> Any:
        host, port, user, password = uri.host, uri.port, uri.user, uri.password
        if uri.local:
            host, port = self._local.address()
            user, password = self.owner, self._local.secret()
        query = {}
        if uri.heartbeat is not None:
            query["heartbeat"] = str(uri.heartbeat)
        url = URL.build(
            scheme="amqps" if uri.tls and not uri.local else "amqp",
            host=host,
            port=port,
            user=user,
            password=password,
            path="/" + uri.vhost,
            query=query,
        )
        timeout = (uri.connection_timeout_ms or 30_000) / 1000
        properties: dict[str, Any] = {"connection_name": f"Shovel {self.name}"}
        tls: dict[str, Any] = {}
        if uri.tls and not uri.local:
            tls = {"context": uri.ssl_context(), "server_hostname": uri.server_hostname()}
        async with asyncio.timeout(timeout):
            return await aiormq.connect(url, client_properties=properties, **tls)

    async def _ensure_queue(self, connection: Any, queue: str, arguments: dict[str, Any]) -> int:
        """Declare ``queue`` passively, or durable with ``arguments`` when it does not
        exist (rabbit_amqp091_shovel's ensure_queue); its message count."""
        channel = await connection.channel()
        try:
            ok = await channel.queue_declare(queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            channel = await connection.channel()
            ok = await channel.queue_declare(queue, durable=True, arguments=arguments)
        count = int(ok.message_count or 0)
        await channel.close()
        return count

    async def _session(self) -> bool:
        """Connect both ends and move messages until a failure (raised) or, with a
        ``src-delete-after``, until done (True)."""
        spec_ = self.definition
        source, self.src_uri = await self._connect(spec_.src_uris, "source")
        try:
            dest, self.dest_uri = await self._connect(spec_.dest_uris, "destination")
            try:
                return await self._move(source, dest)
            finally:
                await _close(dest)
        finally:
            await _close(source)

    async def _move(self, source: Any, dest: Any) -> bool:
        spec_ = self.definition
        if spec_.dest_queue is not None:
            await self._ensure_queue(dest, spec_.dest_queue, spec_.dest_queue_args)
        out = await dest.channel(publisher_confirms=spec_.ack_mode == "on-confirm")
        if spec_.src_queue is not None:
            ready = await self._ensure_queue(source, spec_.src_queue, spec_.src_queue_args)
            queue = spec_.src_queue
        else:
            ready = 0
            declare = await source.channel()
            declared = await declare.queue_declare("", exclusive=True)
            queue = str(declared.queue)
            await declare.queue_bind(queue, str(spec_.src_exchange), spec_.src_exchange_key)
        limit = spec_.delete_after
        remaining: int | None = (
            ready if limit == "queue-length" else limit if isinstance(limit, int) else None
        )
        if remaining == 0:
            return True
        inbound = await source.channel(publisher_confirms=False)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        mover = _Mover(self, inbound, out, remaining, done)
        # basic.qos takes a short: RabbitMQ's shovel would fail on more, Leveret clamps.
        await inbound.basic_qos(prefetch_count=min(max(spec_.prefetch_count, 0), MAX_PREFETCH))
        consuming = await inbound.basic_consume(
            queue,
            mover.on_message,
            no_ack=spec_.ack_mode == "no-ack",
            arguments=spec_.src_consumer_args or None,
        )
        self._set("running")
        closing = [source.closing, dest.closing, inbound.closing, out.closing]
        waiters = [asyncio.ensure_future(f) for f in closing]
        try:
            finished, _ = await asyncio.wait([done, *waiters], return_when="FIRST_COMPLETED")
        finally:
            for waiter in waiters:
                waiter.cancel()
        if done in finished and done.result():
            await mover.drain(str(consuming.consumer_tag))
            return True
        for future in finished:
            failure = None if future is done else future.exception()
            if failure is not None:
                raise failure
        raise ShovelRunError("connection closed")

    def status(self) -> dict[str, Any]:
        """The fields of rabbit_shovel_status that describe it (GET /api/shovels)."""
        spec_ = self.definition
        item: dict[str, Any] = {
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.changed)),
            "name": self.name,
            "vhost": self.vhost,
            "type": "dynamic",
            "state": self.state,
        }
        if self.state == "terminated":
            item["reason"] = self.reason
        if self.state == "running" and self.src_uri and self.dest_uri:
            item["src_uri"] = self.src_uri.redacted()
            item["src_protocol"] = "amqp091"
            item["dest_protocol"] = "amqp091"
            item["dest_uri"] = self.dest_uri.redacted()
            for key, value in spec_.endpoints().items():
                item[key.replace("-", "_")] = value
        return item


async def _close(connection: Any) -> None:
    # Bounded: a peer that stops answering (a node going down, its vhost deleted) must not
    # hold the shovel, nor the node's stop that waits for it.
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await connection.close()
    except Exception:  # noqa: BLE001 - the session is over either way
        pass


class _Mover:
    """Moves one session's deliveries: publish each to the destination, then settle it
    at the source as the ack mode says; counts toward ``src-delete-after``."""

    def __init__(
        self,
        shovel: Shovel,
        inbound: Any,
        out: Any,
        remaining: int | None,
        done: asyncio.Future[bool],
    ) -> None:
        self.shovel = shovel
        self.inbound = inbound
        self.out = out
        self.remaining = remaining
        self.done = done
        self.unconfirmed: set[asyncio.Future[Any]] = set()  # publishes not yet confirmed
        self.writes: set[asyncio.Future[Any]] = set()  # acks and nacks being written
        # Source delivery tags settled above the first one that is not (the channel's
        # tags count from 1), the first one that is not, and the last multiple ack sent.
        self.settled_tags: set[int] = set()
        self.next_tag = 1
        self.acked_upto = 0
        self.flush_pending = False

    def route(self, message: DeliveredMessage) -> tuple[str, str]:
        """The exchange and routing key a message is published with
        (rabbit_shovel_parameters' publish fields)."""
        spec_ = self.shovel.definition
        delivery = message.delivery
        exchange = str(getattr(delivery, "exchange", "") or "")
        key = str(getattr(delivery, "routing_key", "") or "")
        if spec_.dest_queue is not None:
            return "", spec_.dest_queue
        if spec_.dest_exchange is not None:
            exchange = spec_.dest_exchange
        if spec_.dest_exchange_key is not None:
            key = spec_.dest_exchange_key
        return exchange, key

    def properties(self, message: DeliveredMessage) -> spec.Basic.Properties:
        """The properties published: the source's, with ``dest-publish-properties`` over
        them and the forward and timestamp headers when asked for."""
        spec_ = self.shovel.definition
        properties = message.header.properties
        for key, value in spec_.publish_properties.items():
            if hasattr(properties, key):
                setattr(properties, key, value)
        if spec_.add_forward_headers or spec_.add_timestamp_header:
            headers = dict(properties.headers or {})
            if spec_.add_forward_headers:
                earlier = headers.get(SHOVELLED_HEADER)
                headers[SHOVELLED_HEADER] = [
                    self.forward_table(),
                    *(earlier if isinstance(earlier, list) else []),
                ]
            if spec_.add_timestamp_header:
                headers[TIMESTAMP_HEADER] = int(time.time())
            properties.headers = headers
        return properties

    def forward_table(self) -> dict[str, Any]:
        """One ``x-shovelled`` entry (rabbit_shovel_util:add_forward_headers)."""
        shovel, spec_ = self.shovel, self.shovel.definition
        table: dict[str, Any] = {
            "shovelled-by": NODE_NAME,
            "shovel-type": "dynamic",
            "shovel-name": shovel.name,
            "shovel-vhost": shovel.vhost,
            "src-uri": shovel.src_uri.redacted() if shovel.src_uri else "",
            "dest-uri": shovel.dest_uri.redacted() if shovel.dest_uri else "",
        }
        return {**table, **spec_.endpoints()}

    async def on_message(self, message: DeliveredMessage) -> None:
        """A delivery from the source: publish it; settle it when the ack mode allows."""
        if self.remaining is not None:
            if self.remaining > 0:
                self.remaining -= 1
            elif self.shovel.definition.ack_mode != "no-ack":
                return  # past the count: left unacked, requeued when the session closes
            # else: past the count but auto-acked by the source (no-ack): moved rather
            # than lost.
        exchange, key = self.route(message)
        tag = int(getattr(message.delivery, "delivery_tag", 0) or 0)
        confirmation = await publish_as_is(
            self.out, exchange, key, self.properties(message), message.body
        )
        mode = self.shovel.definition.ack_mode
        if mode == "no-ack":
            self.settled()
        elif confirmation is None:  # on-publish: written to the destination
            self.ack(tag)
            self.settled()
        else:
            self.unconfirmed.add(confirmation)
            confirmation.add_done_callback(lambda f: self.confirmed(f, tag))

    def confirmed(self, confirmation: asyncio.Future[Any], tag: int) -> None:
        """The destination's confirm of a publish: ack (or, nacked, requeue) at source."""
        self.unconfirmed.discard(confirmation)
        if confirmation.cancelled() or confirmation.exception() is not None:
            return  # the session is failing: the source requeues it when it closes
        if isinstance(confirmation.result(), spec.Basic.Nack):
            self.send(self.inbound.basic_nack(tag, requeue=True, wait=False))
            self.ack(tag, nacked=True)
            if self.remaining is not None:
                self.remaining += 1
            return
        self.ack(tag)
        self.settled()

    def ack(self, tag: int, nacked: bool = False) -> None:
        """Settle delivery ``tag`` at the source. The acks go as one multiple ack up to the
        highest tag below which every delivery is settled, once per turn of the loop: one
        frame for a window of confirms rather than one each (a nacked tag counts as
        settled, its nack written before)."""
        self.settled_tags.add(tag)
        if tag != self.next_tag:
            return
        while self.next_tag in self.settled_tags:
            self.settled_tags.discard(self.next_tag)
            self.next_tag += 1
        if not nacked and not self.flush_pending:
            self.flush_pending = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write the multiple ack of everything settled so far."""
        self.flush_pending = False
        if self.next_tag > self.acked_upto + 1:
            self.acked_upto = self.next_tag - 1
            self.send(self.inbound.basic_ack(self.acked_upto, multiple=True, wait=False))

    def send(self, frame: Coroutine[Any, Any, None]) -> None:
        """Write an ack or nack to the source; kept until written, and what drain waits
        for."""
        task = asyncio.ensure_future(frame)
        self.writes.add(task)
        task.add_done_callback(self.writes.discard)

    def settled(self) -> None:
        """One message moved for good; the count is done when nothing is left."""
        if self.remaining == 0 and not self.unconfirmed and not self.done.done():
            self.done.set_result(True)

    async def drain(self, consumer_tag: str) -> None:
        """The count is done: wait for the last confirms and acks, then cancel the
        consumer (a round trip, so the source has the acks before the session closes;
        deliveries past the count are then requeued by the close)."""
        if self.unconfirmed:
            await asyncio.wait(self.unconfirmed)
        self.flush()
        if self.writes:
            await asyncio.wait(self.writes)
        await self.inbound.basic_cancel(consumer_tag)


async def publish_as_is(
    channel: Any, exchange: str, routing_key: str, properties: spec.Basic.Properties, body: bytes
) -> asyncio.Future[Any] | None:
    """Publish with ``properties`` exactly as given; the confirm's future in confirm mode
    (None otherwise).

    aiormq's ``basic_publish`` gives a message without a ``message_id`` a random one (it
    tracks returns by it); a shovel must not change the messages it moves, so this writes
    the same frames through the channel's queue, under its lock, and registers the
    confirm where aiormq's frame handler settles it (aiormq>=6.8,<8 keeps these)."""
    frames: list[Any] = [
        spec.Basic.Publish(exchange=exchange, routing_key=routing_key),
        ContentHeader(properties=properties, body_size=len(body)),
        *list(channel._split_body(body)),
    ]
    confirmation: asyncio.Future[Any] | None = None
    async with channel.lock:
        if channel.publisher_confirms:
            channel.delivery_tag += 1
            confirmation = channel.create_future()
            channel.confirmations[channel.delivery_tag] = confirmation
        await channel.write_queue.put(
            ChannelFrame.marshall(frames=frames, channel_number=channel.number, drain_future=None)
        )
    return confirmation
