"""Development cluster: real local MariaDB or MySQL 8 shards, traffic with a ledger, resharding."""
