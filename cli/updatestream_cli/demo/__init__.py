"""`updatestream demo`: the whole system on one machine, without a Kubernetes cluster.

A development cluster, a memcached, a MariaDB for the Version Stream, live traffic with a
ledger, one UpdateStream into all three sinks launched by the operator's own service and
local launcher, a live split, the hop inside the running job, and the verifier on each sink.
See docs/demo.md.
"""
