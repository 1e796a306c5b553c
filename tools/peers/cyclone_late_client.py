"""Cyclone DDS peer (PyPI cyclonedds) for tests/node_services_fastdds.rs: a service client, framed
as rmw_cyclonedds frames one, whose reply reader the node discovers only after the request came.
For ~/reset and get_parameters in turn: the request writer is made and matched, the request
written, and only `--late` seconds later the reply reader made; then it waits for the reply.
Prints one JSON line: each reply (null when none came within `--timeout` s of the request) and
the seconds from the request to it.

Run only inside a private network namespace (the test uses `unshare -n`); CYCLONEDDS_URI is set
to loopback only as a second guard (by ros_idl, imported first).
"""
import argparse
import json
import os
import time

from ros_idl import GetReq, GetResp, TriggerReq, TriggerResp, reliable_qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic


def late_call(dp, node, name, req_type, resp_type, late, timeout, **fields):
    qos = reliable_qos(10)
    writer = DataWriter(dp, Topic(dp, f"rq{node}/{name}Request", req_type), qos=qos)
    t0 = time.time()
    while writer.get_publication_matched_status().current_count == 0:
        if time.time() - t0 > timeout:
            return None, None
        time.sleep(0.01)
    # Its last byte on the wire (the most significant: little-endian) as a reader's entity kind
    # (0x07) would have it: in this framing it is only the client's own number.
    guid, seq = 0x0702030405060708, 1
    writer.write(req_type(client_guid=guid, seq=seq, **fields))
    sent = time.time()
    time.sleep(late)
    reader = DataReader(dp, Topic(dp, f"rr{node}/{name}Reply", resp_type), qos=qos)
    while time.time() - sent < timeout:
        for s in reader.take(N=10):
            if s.seq == seq and s.client_guid == guid:
                return s, time.time() - sent
        time.sleep(0.02)
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", default="/cam/sp_dust3r")
    ap.add_argument("--late", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=20.0)
    args = ap.parse_args()
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    report = {}
    r, s = late_call(dp, args.node, "reset", TriggerReq, TriggerResp, args.late, args.timeout,
                     structure_needs_at_least_one_member=0)
    report["reset"], report["reset_s"] = (None if r is None else [r.success, r.message]), s
    r, s = late_call(dp, args.node, "get_parameters", GetReq, GetResp, args.late, args.timeout,
                     names=["max_keypoints"])
    report["get"], report["get_s"] = (None if r is None else [v.integer_value for v in r.values]), s
    print(json.dumps(report))


if __name__ == "__main__":
    main()
