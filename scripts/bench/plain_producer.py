"""Reference for collector -> Kafka throughput: a plain librdkafka producer (Python
confluent-kafka) re-sending the exact records (key, value, headers) that `collector run`
wrote to SRC_TOPIC, to a new topic DST_TOPIC, with the collector's producer policy
(enable.idempotence, acks=all, zstd, linger.ms=5). The records are read into memory
first; the timed part is produce() of every record until flush() returns (all acked).
usage: plain_producer.py BROKERS SRC_TOPIC DST_TOPIC [SKIP]
SKIP: leave out the first SKIP records (e.g. the initial list) and send the rest."""
import sys
import time

if len(sys.argv) < 4 or sys.argv[1] in ("-h", "--help"):
    asked = len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help")
    print(__doc__, file=sys.stdout if asked else sys.stderr)
    sys.exit(0 if asked else 2)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402 (after --help)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

brokers, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
skip = int(sys.argv[4]) if len(sys.argv) > 4 else 0
c = Consumer({"bootstrap.servers": brokers, "group.id": "dump-%f" % time.time(),
              "enable.auto.commit": False})
lo, hi = c.get_watermark_offsets(TopicPartition(src, 0), timeout=10)
c.assign([TopicPartition(src, 0, lo)])
records = []
while len(records) < hi - lo:
    for m in c.consume(num_messages=10000, timeout=1.0):
        if m.error() is None:
            records.append((m.key(), m.value(), m.headers()))
c.close()
records = records[skip:]
admin = AdminClient({"bootstrap.servers": brokers})
for f in admin.create_topics([NewTopic(dst, 1, 1)]).values():
    f.result()
p = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "acks": "all",
              "compression.type": "zstd", "linger.ms": 5, "allow.auto.create.topics": False,
              "queue.buffering.max.messages": 1000000})
p.list_topics(dst, timeout=10)
# Warm-up (not timed, not counted): the idempotent producer's PID and the connection.
p.produce(dst, value=b"", key=b"warmup")
p.flush(30)
failed = [0]
def cb(err, msg):
    if err is not None:
        failed[0] += 1
start = time.time(); cpu0 = time.process_time()
for k, v, h in records:
    while True:
        try:
            p.produce(dst, value=v, key=k, headers=h, on_delivery=cb)
            break
        except BufferError:
            p.poll(0.005)
    p.poll(0)
left = p.flush(60)
t = time.time() - start; cpu = time.process_time() - cpu0
nbytes = sum(len(v or b"") for _, v, _ in records)
print("plain producer: %d records (%d value bytes) in %.3f s = %.0f events/s; not acked %d, failed %d; producer process CPU %.2f s"
      % (len(records), nbytes, t, len(records) / t, left, failed[0], cpu))
