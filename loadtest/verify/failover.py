"""The Redis a run uses, by name: `single` (`topology.py`), `sentinel` (`sentinel.py`: a
master, two replicas, three Sentinels) or `cluster` (`cluster.py`: three masters with a
replica each). Replication is asynchronous: a write the master acknowledged may be lost
with it; the gateway's `redis.claim_replicas` makes it wait for that many replicas first."""

from loadtest.verify.cluster import Cluster
from loadtest.verify.sentinel import Sentinel
from loadtest.verify.topology import Single, Topology


def make_topology(name: str, claim_replicas: int = 0) -> Topology:
    if name == "single":
        return Single()
    if name == "sentinel":
        return Sentinel(claim_replicas)
    if name == "cluster":
        return Cluster(claim_replicas)
    raise ValueError(name)
