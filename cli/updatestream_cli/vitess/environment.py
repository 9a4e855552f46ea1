"""What every process of one local Vitess cluster shares: directories, programs, user, flags.

Layout of the cluster directory `D`:

    D/state.json               processes and ports of this cluster (see `cluster`)
    D/keyspace.yaml            the Keyspace manifest: one shard per primary tablet's mysqld
    D/secrets/<name>/...       credentials as files, the layout of a mounted Secret
    D/runtime/                 the programs, linked from the build cache (see `runtime`)
    D/etcd/                    the topology server's data
    D/vtdataroot/vt_<uid>/     one tablet's mysqld (my.cnf, data, binlogs, error.log)
    D/logs/                    every process's output
    D/mysql-extra.cnf          the settings added to every tablet's my.cnf
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from updatestream_cli.vitess.runtime import Runtime, ServiceUser
from updatestream_cli.vitess.topology import Etcd

# Added to the my.cnf that mysqlctl writes for every tablet. A change stream needs full row
# images with column names (binlog_row_image and binlog_row_metadata FULL); MySQL 8.0 defaults to
# binlog_row_metadata=MINIMAL. Durability is relaxed: a crash of mysqld is not simulated here.
# The transactions' history in performance_schema tells the traffic generator which GTID its
# commits through vtgate got (`gateway`).
MYSQL_EXTRA_CNF = """\
# UpdateStream: settings added to every tablet's my.cnf
bind-address = 127.0.0.1
binlog_format = ROW
binlog_row_image = FULL
binlog_row_metadata = FULL
default-time-zone = +00:00
character-set-server = utf8mb4
innodb_buffer_pool_size = 64M
innodb_redo_log_capacity = 32M
innodb_flush_log_at_trx_commit = 2
sync_binlog = 0
max_binlog_size = 64M
performance-schema-consumer-events-transactions-history-long = ON
"""


@dataclass
class ClusterEnv:
    """Directories, programs, service user and topology of one cluster directory."""

    dir: Path
    runtime: Runtime
    user: ServiceUser
    etcd: Etcd
    cell: str
    keyspace: str

    @property
    def vtdataroot(self) -> Path:
        return self.dir / "vtdataroot"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def extra_cnf(self) -> Path:
        return self.dir / "mysql-extra.cnf"

    def environ(self) -> dict[str, str]:
        """The environment of every Vitess program (nothing inherited but PATH and locale)."""
        return {
            "PATH": f"{self.runtime.vt_bin}:/usr/local/bin:/usr/bin:/bin",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": str(self.dir),
            "TMPDIR": str(self.dir / "tmp"),
            "VTROOT": str(self.runtime.vt_bin.parent),
            "VTDATAROOT": str(self.vtdataroot),
            "VT_MYSQL_ROOT": str(self.runtime.mysql_root),
            "VT_MYSQL_BASEDIR": str(self.runtime.mysql_root),
            "EXTRA_MY_CNF": str(self.extra_cnf),
        }

    def common_flags(self) -> list[str]:
        """Flags every Vitess server takes: topology, text logs to stderr, no config file."""
        return [
            *self.etcd.topo_flags(),
            "--log-format", "text",
            "--config-file-not-found-handling", "ignore",
        ]  # fmt: skip

    def prepare(self) -> None:
        """Create the directories the service user writes to, owned by it."""
        for path in (self.dir, self.vtdataroot, self.logs, self.dir / "tmp"):
            path.mkdir(parents=True, exist_ok=True)
            self.user.chown(path, recursive=False)
        if not self.extra_cnf.exists() or self.extra_cnf.read_text() != MYSQL_EXTRA_CNF:
            self.extra_cnf.write_text(MYSQL_EXTRA_CNF)
        self.extra_cnf.chmod(0o644)
