"""A local Vitess v24 cluster (etcd, vtctld, vtgate, tablets on MySQL 8) driven from Python."""
