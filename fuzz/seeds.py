#!/usr/bin/env python3
"""Writes the JSON seeds of the fuzz targets from the test fixtures (tests/fixtures):
kubectl recordings, their documents, objects and watch lines, audit log lines, and
AdmissionReview requests. Usage: seeds.py OUT_DIR (one directory per target below it).
scripts/fuzz seeds runs it; the generated Avro, command, checkpoint and report seeds come
from the targets themselves (IPAUDIT_FUZZ_WRITE_SEEDS)."""
import gzip
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
out = pathlib.Path(sys.argv[1])


def put(target, name, data):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def documents(text):
    decoder = json.JSONDecoder()
    i, docs = 0, []
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i >= len(text):
            return docs
        doc, end = decoder.raw_decode(text, i)
        docs.append((doc, text[i:end]))
        i = end


objects = []
for path in sorted((FIXTURES / "incidents").glob("*/*.json")):
    docs = documents(path.read_text())
    stem = f"{path.parent.name}-{path.stem}"
    # A recording: its first documents as kubectl printed them.
    put("kubectl_recording", stem + ".json", "\n".join(t for _, t in docs[:6]) + "\n")
    for i, (doc, text) in enumerate(docs[:3]):
        put("kubectl_document", f"{stem}-{i}.json", text)
        put("kubectl_document", f"{stem}-{i}-compact.json", json.dumps(doc, separators=(",", ":")))
        put("collector_object", f"{stem}-{i}.json", json.dumps(doc["object"]))
        objects.append(doc["object"])
    put("watch_line", stem + ".jsonl", "".join(json.dumps(d, separators=(",", ":")) + "\n" for d, _ in docs[:3]))
put("watch_line", "bookmark.jsonl", '{"type":"BOOKMARK","object":{"kind":"IP","apiVersion":"kubeovn.io/v1","metadata":{"resourceVersion":"12345"}}}\n{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410,"message":"too old"}}\n')

for path in sorted((FIXTURES / "audit").glob("*/*.log*")):
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    lines = data.split(b"\n")[:8]
    text = b"\n".join(lines) + b"\n"
    stem = f"{path.parent.name}-{path.name.split('.')[0]}"
    put("audit_log", stem + "-plain", b"\x00" + text)
    put("audit_log", stem + "-gzip", b"\x01" + text)


def review(operation, group, resource, name, namespace=None, old=None, uid="r-1"):
    request = {
        "uid": uid,
        "kind": {"group": group, "version": "v1", "kind": resource},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "name": name,
        "operation": operation,
        "userInfo": {"username": "alice"},
        "dryRun": False,
    }
    if namespace:
        request["namespace"] = namespace
    if old is not None:
        request["oldObject"] = old
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


subnet = next((o for o in objects if o.get("kind") == "Subnet"), {"metadata": {"name": "net1"}})
put("admission_review", "delete-subnet.json", review("DELETE", "kubeovn.io", "subnets", "net1", old=subnet))
put("admission_review", "delete-ippool.json", review("DELETE", "whereabouts.cni.cncf.io", "ippools", "pool1", "kube-system"))
put("admission_review", "delete-spiderippool.json", review("DELETE", "spiderpool.spidernet.io", "spiderippools", "spool1"))
put("admission_review", "create-subnet.json", review("CREATE", "kubeovn.io", "subnets", "net2"))
put("admission_review", "delete-pod.json", review("DELETE", "", "pods", "a", "ns"))
put("admission_review", "unreadable-with-uid.json", '{"request": {"uid": "r-2", "operation": 7}}')
