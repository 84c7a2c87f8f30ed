"""RabbitMQ topology of the event stream: the topic exchange, the analytics queue and its dead letters.

Publishers and consumers both declare it, so events published before analytics first starts are kept in
its queue instead of being dropped as unroutable.
"""
from __future__ import annotations

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange

ANALYTICS_BINDING = "analytics.#"
# Deliveries of one message the analytics queue allows: the broker counts each return to the queue
# (a nack, or the consumer's channel closing with it unacked) in `x-delivery-count`, and dead-letters the
# message itself (x-death reason "delivery_limit") once that count passes the limit.
DELIVERY_LIMIT = 5


def dead_letter_names(queue: str) -> tuple[str, str]:
    """(exchange, queue) that receive messages the consumer rejects."""
    return f"{queue}.dlx", f"{queue}.dead"


async def declare_dead_letters(channel: AbstractChannel, *, queue: str) -> AbstractExchange:
    """Declare the dead-letter exchange of `queue` and the durable queue bound to it; returns the exchange."""
    dlx_name, dead_name = dead_letter_names(queue)
    dlx = await channel.declare_exchange(dlx_name, aio_pika.ExchangeType.FANOUT, durable=True)
    dead = await channel.declare_queue(dead_name, durable=True, arguments={"x-queue-type": "quorum"})
    await dead.bind(dlx)
    return dlx


async def declare_topology(channel: AbstractChannel, *, exchange: str, queue: str | None) -> AbstractExchange:
    """Declare the durable topic exchange and, when `queue` is given, the analytics queue bound to it."""
    events = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    if queue:
        dlx = await declare_dead_letters(channel, queue=queue)
        main = await channel.declare_queue(
            queue,
            durable=True,
            arguments={
                "x-queue-type": "quorum", "x-dead-letter-exchange": dlx.name, "x-delivery-limit": DELIVERY_LIMIT,
            },
        )
        await main.bind(events, routing_key=ANALYTICS_BINDING)
    return events
