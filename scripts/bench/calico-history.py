#!/usr/bin/env python3
"""A Calico history for state-bench, as one kubectl watch recording: NODES nodes with a
block each, then ROUNDS rounds of PODS pod starts through the CNI's writes (handle first,
then the block; each block write carries the whole block), with deletions (block first,
then the handle) once 40 pods per node live. Not a fixture: a load (the blocks fill up:
every write is a 64-ordinal block).

Usage: calico-history.py NODES PODS ROUNDS OUT_DIR   (writes OUT_DIR/*.json; cat them)"""
import datetime
import json
import random
import sys

random.seed(7)
NODES, PODS, ROUNDS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = sys.argv[4]
rv = 1000
files = {k: open(f"{out}/{k}.json", "w") for k in ("pods", "ipamblocks", "ipamhandles", "nodes")}
def put(f, typ, obj):
    global rv
    rv += 1
    obj["metadata"]["resourceVersion"] = str(rv)
    files[f].write(json.dumps({"type": typ, "object": obj}) + "\n")
t0 = 1_760_000_000
def ts(s):
    return datetime.datetime.fromtimestamp(t0 + s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
def managed(s):
    return [{"manager": "calico-ipam", "operation": "Update", "time": ts(s)}]
blocks = {}
for n in range(NODES):
    node = f"worker-{n}"
    put("nodes", "ADDED", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": f"n{n}", "managedFields": managed(0)}})
    cidr = f"10.{n // 256}.{n % 256}.0/26"
    blocks[n] = {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": cidr.replace(".", "-").replace("/", "-"), "uid": f"b{n}", "managedFields": managed(0)},
        "spec": {"cidr": cidr, "affinity": "host:" + node, "allocations": [None] * 64, "attributes": [],
                 "unallocated": list(range(64)), "sequenceNumber": 0, "sequenceNumberForAllocation": {}, "deleted": False}}
    put("ipamblocks", "ADDED", blocks[n])
live = {}
s = 10
seq = 0
for r in range(ROUNDS):
    for p in range(PODS):
        s += 1
        n = random.randrange(NODES)
        b = blocks[n]["spec"]
        if not b["unallocated"]:
            continue
        seq += 1
        name = f"app-{seq}"
        cid = f"{seq:064x}"
        handle = f"k8s-pod-network.{cid}"
        put("pods", "ADDED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"p{seq}",
            "annotations": {"cni.projectcalico.org/containerID": cid}, "managedFields": managed(s)},
            "spec": {"nodeName": f"worker-{n}"}, "status": {"phase": "Pending"}})
        put("ipamhandles", "ADDED", {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
            "metadata": {"name": handle, "uid": f"h{seq}", "managedFields": managed(s)},
            "spec": {"handleID": handle, "block": {b["cidr"]: 1}, "deleted": False}})
        o = b["unallocated"].pop(0)
        b["attributes"].append({"handle_id": handle, "secondary": {"namespace": "default", "pod": name, "node": f"worker-{n}"}})
        b["allocations"][o] = len(b["attributes"]) - 1
        b["sequenceNumber"] += 1
        b["sequenceNumberForAllocation"][str(o)] = b["sequenceNumber"]
        blocks[n]["metadata"]["managedFields"] = managed(s)
        put("ipamblocks", "MODIFIED", blocks[n])
        net = b["cidr"].split("/")[0].rsplit(".", 1)[0]
        ip = f"{net}.{o}"
        put("pods", "MODIFIED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"p{seq}",
            "annotations": {"cni.projectcalico.org/containerID": cid}, "managedFields": managed(s)},
            "spec": {"nodeName": f"worker-{n}"}, "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})
        live[name] = (n, o, handle, cid, seq, ip)
        # delete an old pod half the time
        if len(live) > NODES * 40 and random.random() < 0.6:
            victim = random.choice(list(live))
            vn, vo, vh, vcid, vseq, vip = live.pop(victim)
            # The pod deleted gracefully (terminating), then the CNI DEL.
            put("pods", "MODIFIED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": victim, "namespace": "default", "uid": f"p{vseq}",
                "annotations": {"cni.projectcalico.org/containerID": vcid}, "managedFields": managed(s),
                "deletionTimestamp": ts(s + 30), "deletionGracePeriodSeconds": 30},
                "spec": {"nodeName": f"worker-{vn}"}, "status": {"phase": "Running", "podIP": vip, "podIPs": [{"ip": vip}]}})
            vb = blocks[vn]["spec"]
            idx = vb["allocations"][vo]
            vb["allocations"][vo] = None
            vb["unallocated"].append(vo)
            del vb["sequenceNumberForAllocation"][str(vo)]
            used = sorted({a for a in vb["allocations"] if a is not None})
            ren = {old: new for new, old in enumerate(used)}
            vb["attributes"] = [vb["attributes"][old] for old in used]
            vb["allocations"] = [None if a is None else ren[a] for a in vb["allocations"]]
            vb["sequenceNumber"] += 1
            blocks[vn]["metadata"]["managedFields"] = managed(s)
            put("ipamblocks", "MODIFIED", blocks[vn])
            put("ipamhandles", "DELETED", {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
                "metadata": {"name": vh, "uid": f"h{vseq}", "managedFields": managed(s)},
                "spec": {"handleID": vh, "block": {vb["cidr"]: 1}, "deleted": True}})
            put("pods", "DELETED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": victim, "namespace": "default", "uid": f"p{vseq}",
                "annotations": {"cni.projectcalico.org/containerID": vcid}, "managedFields": managed(s)},
                "spec": {"nodeName": f"worker-{vn}"}, "status": {"phase": "Running", "podIP": vip, "podIPs": [{"ip": vip}]}})
for f in files.values():
    f.close()
print(rv - 1000, "events")
