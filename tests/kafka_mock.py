"""A real Kafka-protocol broker on loopback: librdkafka's mock cluster, owned by a producer in this process.

`test.mock.num.brokers` makes the producer start an in-process cluster; with `debug=mock` librdkafka logs
its `bootstrap.servers=127.0.0.1:<port>`, which any other client (the server, even in another process)
connects to. The cluster lives as long as the producer.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from confluent_kafka import Producer

PARTITIONS = 4  # librdkafka's mock cluster default for auto-created topics
_BOOTSTRAP = re.compile(r"Mock cluster \S+ bootstrap\.servers=(\S+)")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bootstrap: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.bootstrap is None and (found := _BOOTSTRAP.search(record.getMessage())):
            self.bootstrap = found.group(1)


class MockKafka:
    def __init__(self) -> None:
        capture = _Capture()
        logger = logging.Logger("mock-kafka", logging.DEBUG)
        logger.addHandler(capture)
        self.producer = Producer(
            {"test.mock.num.brokers": 1, "debug": "mock", "bootstrap.servers": "127.0.0.1:1", "linger.ms": 0},
            logger=logger,
        )
        deadline = time.monotonic() + 30
        while capture.bootstrap is None:
            if time.monotonic() > deadline:
                raise RuntimeError("librdkafka did not log the mock cluster's bootstrap address")
            self.producer.poll(0.05)
        self.bootstrap: str = capture.bootstrap

    def create_topic(self, name: str) -> None:
        """The mock cluster answers CreateTopics without a controller; it auto-creates a topic with
        `PARTITIONS` partitions on its first metadata request instead."""
        meta = self.producer.list_topics(name, timeout=30)
        assert len(meta.topics[name].partitions) == PARTITIONS, meta.topics[name]

    def produce(self, topic: str, messages: list[tuple[int, bytes]]) -> None:
        """(partition, value) in order; returns once every message is acknowledged."""
        failures: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        for partition, value in messages:
            self.producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
        assert self.producer.flush(30) == 0
        assert not failures, failures

    def end_offsets(self, topic: str) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "probe"})
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)
            }
        finally:
            consumer.close()
