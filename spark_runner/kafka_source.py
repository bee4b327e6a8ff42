"""Reading one routine-load batch from Kafka (confluent-kafka / librdkafka), from explicit offsets.

Offsets are never committed to Kafka: the job's progress lives with its transactions, so the consumer
is assigned its partitions at the job's committed offsets and only reads.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tables.errors import KafkaConfigError, KafkaPropertyError, KafkaSourceError
from tables.routine_load import OFFSET_BEGINNING, OFFSET_END, RoutineLoadSpec, kafka_client_config

READ_CHUNK = 100  # messages taken from the client per call: what the server holds at once, besides its queue


@dataclass
class Batch:
    """One batch, staged as it is read: how many messages, their bytes, the bytes of the staged body and the next
    offset of each partition they came from. The messages themselves are never held together in memory (a batch
    may be `max_batch_size`, up to 10 GB)."""

    rows: int = 0
    size: int = 0
    staged: int = 0
    next_offsets: dict[int, int] = field(default_factory=dict)


class KafkaBatches:
    """A consumer assigned to the job's partitions, reading batches bounded by rows, bytes and time."""

    def __init__(self, spec: RoutineLoadSpec, progress: dict[int, int], *, cert_dir: Path | None = None) -> None:
        """Raises: KafkaConfigError (a refused client property), KafkaSourceError (no topic, partition, broker)."""
        try:  # every consumer's settings pass the allow-list, whatever release stored the job
            custom = kafka_client_config(spec.custom_properties, cert_dir)
        except KafkaPropertyError as exc:
            raise KafkaConfigError(exc.message) from None
        conf: dict[str, object] = {
            "bootstrap.servers": spec.broker_list,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "socket.timeout.ms": 10000,
        }
        conf.update(custom)
        self.spec = spec
        self.consumer = Consumer(conf)
        self.partitions = self._partitions()
        self.start: dict[int, int] = {}
        for partition in self.partitions:
            if partition in progress:
                self.start[partition] = progress[partition]
        self.start.update(self._resolve({p: self._initial(p) for p in self.partitions if p not in self.start}))
        self.consumer.assign([TopicPartition(spec.topic, p, o) for p, o in self.start.items()])

    def _partitions(self) -> list[int]:
        try:
            meta = self.consumer.list_topics(self.spec.topic, timeout=10)
        except KafkaException as exc:
            raise KafkaSourceError(f"failed to get partition meta: {exc}") from None
        topic = meta.topics.get(self.spec.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise KafkaSourceError(f"topic {self.spec.topic} does not exist or has no partition")
        existing = sorted(topic.partitions)
        if not self.spec.partitions:
            return existing
        for partition in self.spec.partitions:
            if partition not in existing:
                raise KafkaSourceError(f"partition {partition} of topic {self.spec.topic} does not exist")
        return list(self.spec.partitions)

    def _initial(self, partition: int) -> int:
        if self.spec.partitions and self.spec.start_offsets:
            return self.spec.start_offsets[list(self.spec.partitions).index(partition)]
        return self.spec.default_offset

    def _resolve(self, wanted: dict[int, int]) -> dict[int, int]:
        """OFFSET_BEGINNING / OFFSET_END → the partition's low / high watermark."""
        out = {}
        for partition, offset in wanted.items():
            if offset in (OFFSET_BEGINNING, OFFSET_END):
                low, high = self.watermarks(partition)
                offset = low if offset == OFFSET_BEGINNING else high
            out[partition] = offset
        return out

    def watermarks(self, partition: int) -> tuple[int, int]:
        try:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(self.spec.topic, partition), timeout=10)
        except KafkaException as exc:
            raise KafkaSourceError(f"failed to get offsets of partition {partition}: {exc}") from None
        return int(low), int(high)

    def read(self, stop: threading.Event, path: Path, *, fmt: str, strip_outer_array: bool) -> Batch:
        """Messages until `max_batch_rows`, `max_batch_size` or `max_batch_interval`, whichever comes first, each
        written to the stream-load body at `path` as it arrives (`stage_message`).

        Raises:
            KafkaSourceError: the brokers report an error other than the end of a partition.
        """
        batch = Batch()
        deadline = time.monotonic() + self.spec.max_batch_interval_s
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            while batch.rows < self.spec.max_batch_rows and batch.size < self.spec.max_batch_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or stop.is_set():
                    break
                wanted = min(self.spec.max_batch_rows - batch.rows, READ_CHUNK)
                for msg in self.consumer.consume(num_messages=wanted, timeout=min(remaining, 0.2)):
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaSourceError(f"consume failed: {error.str()}")
                    value = msg.value() or b""
                    stage_message(out, value, fmt=fmt, strip_outer_array=strip_outer_array)
                    batch.rows += 1
                    batch.size += len(value)
                    partition, offset = msg.partition(), msg.offset()
                    assert partition is not None and offset is not None  # set on every fetched message
                    batch.next_offsets[partition] = offset + 1
            batch.staged = out.tell()
        return batch

    def rewind(self, progress: dict[int, int]) -> None:
        """Go back to the committed offsets (after a batch that did not commit)."""
        self.start = {p: progress.get(p, o) for p, o in self.start.items()}
        self.consumer.assign([TopicPartition(self.spec.topic, p, o) for p, o in self.start.items()])

    def close(self) -> None:
        self.consumer.close()


def stage_message(out: BinaryIO, value: bytes, *, fmt: str, strip_outer_array: bool) -> None:
    """Write one message as stream-load body lines: one CSV line (Doris appends the line delimiter), or one JSON
    object per line (an array message gives one line per element with `strip_outer_array`; a message that is not
    JSON stays one line, to be counted as an error row)."""
    if fmt != "json":
        out.write(value + b"\n")
        return
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):  # (a message nested deeper than Python's recursion limit is an error row)
        out.write(value.replace(b"\r", b" ").replace(b"\n", b" ") + b"\n")
        return
    items = doc if strip_outer_array and isinstance(doc, list) else [doc]
    for item in items:
        out.write(json.dumps(item, separators=(",", ":")).encode() + b"\n")
