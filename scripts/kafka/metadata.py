#!/usr/bin/env python3
"""Asks a Kafka broker for its cluster metadata (one Metadata request, version 4, over
PLAINTEXT) and says whether the cluster is ready: at least MIN_BROKERS brokers in the
answer (a KRaft broker lists only brokers that registered and are unfenced) and a
controller named. Standard library only, so that `scripts/broker` needs no client.

Usage: metadata.py HOST:PORT [MIN_BROKERS]
Exit 0 and print `brokers=N controller=ID` when ready; exit 1 (reason on stderr) when not.
"""

import socket
import struct
import sys

API_METADATA = 3
VERSION = 4  # Kafka 4 serves Metadata v4 to v13 (v0-v3 were removed by KIP-896).


def request() -> bytes:
    client_id = b"ipaudit-broker-ready"
    header = struct.pack(">hhih", API_METADATA, VERSION, 1, len(client_id)) + client_id
    # topics: an empty array (null would ask for every topic); allow_auto_topic_creation:
    # false.
    body = struct.pack(">i?", 0, False)
    message = header + body
    return struct.pack(">i", len(message)) + message


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return data


class Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        value = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value[0]

    def string(self):
        length = self.take(">h")
        if length < 0:
            return None
        value = self.data[self.at : self.at + length].decode()
        self.at += length
        return value


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    host, port = sys.argv[1].rsplit(":", 1)
    min_brokers = int(sys.argv[2]) if len(sys.argv) == 3 else 1
    try:
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            sock.settimeout(5)
            sock.sendall(request())
            size = struct.unpack(">i", read_exact(sock, 4))[0]
            reply = Reader(read_exact(sock, size))
    except (OSError, ConnectionError) as error:
        print(f"no metadata from {sys.argv[1]}: {error}", file=sys.stderr)
        return 1
    reply.take(">i")  # correlation id
    reply.take(">i")  # throttle_time_ms
    brokers = reply.take(">i")
    for _ in range(max(brokers, 0)):
        reply.take(">i")  # node id
        reply.string()  # host
        reply.take(">i")  # port
        reply.string()  # rack
    reply.string()  # cluster id
    controller = reply.take(">i")
    if brokers < min_brokers or controller < 0:
        print(
            f"not ready: {brokers} of {min_brokers} brokers, controller {controller}",
            file=sys.stderr,
        )
        return 1
    print(f"brokers={brokers} controller={controller}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
