"""RabbitMQ topology of the event stream: the topic exchange, the analytics queue and its dead letters.

Publishers and consumers both declare it, so events published before analytics first starts are kept in
its queue instead of being dropped as unroutable.
"""
from __future__ import annotations

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange

ANALYTICS_BINDING = "analytics.#"


def dead_letter_names(queue: str) -> tuple[str, str]:
    """(exchange, queue) that receive messages the consumer rejects."""
    return f"{queue}.dlx", f"{queue}.dead"


async def declare_topology(channel: AbstractChannel, *, exchange: str, queue: str | None) -> AbstractExchange:
    """Declare the durable topic exchange and, when `queue` is given, the analytics queue bound to it.

    Publisher and consumer both call this, so events published before analytics first starts
    are kept in its queue instead of being dropped as unroutable.
    """
    events = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    if queue:
        dlx_name, dead_name = dead_letter_names(queue)
        dlx = await channel.declare_exchange(dlx_name, aio_pika.ExchangeType.FANOUT, durable=True)
        dead = await channel.declare_queue(dead_name, durable=True, arguments={"x-queue-type": "quorum"})
        await dead.bind(dlx)
        main = await channel.declare_queue(
            queue,
            durable=True,
            arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": dlx_name, "x-delivery-limit": 5},
        )
        await main.bind(events, routing_key=ANALYTICS_BINDING)
    return events
