"""Development cluster: real local MariaDB shards, traffic with a ledger, and resharding."""
