#!/usr/bin/env python3
"""An independent Avro implementation (fastavro, from PyPI) reads what ipaudit wrote.

    fastavro_reads_ipaudit.py CONTAINER.avro MESSAGE.bin EXPECTED.json SCHEMA.avsc

Checks that every record of the container file equals the expected JSON, that the
single-object message's header carries fastavro's CRC-64-AVRO fingerprint of the schema,
and that its body decodes to the first expected record. Exits 0 on success.
"""
import datetime
import json
import sys

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form


def plain(value):
    """fastavro turns timestamp-millis into datetimes; compare as milliseconds."""
    if isinstance(value, datetime.datetime):
        return int(round(value.timestamp() * 1000))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def main(container, message, expected_path, schema_path):
    expected = json.load(open(expected_path))
    with open(container, "rb") as f:
        records = [plain(r) for r in fastavro.reader(f)]
    if records != expected:
        for i, (got, want) in enumerate(zip(records, expected)):
            if got != want:
                print(f"record {i} differs:\n got  {got}\n want {want}", file=sys.stderr)
                break
        print(f"{len(records)} records read, {len(expected)} expected", file=sys.stderr)
        return 1
    schema = fastavro.parse_schema(json.load(open(schema_path)))
    data = open(message, "rb").read()
    want_fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    if data[:2] != b"\xc3\x01" or data[2:10] != want_fp:
        print(f"header {data[:10].hex()} != c301{want_fp.hex()}", file=sys.stderr)
        return 1
    import io
    body = plain(fastavro.schemaless_reader(io.BytesIO(data[10:]), schema))
    if body != expected[0]:
        print(f"message differs:\n got  {body}\n want {expected[0]}", file=sys.stderr)
        return 1
    print(f"fastavro {fastavro.__version__}: {len(records)} container records and 1 message match")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
