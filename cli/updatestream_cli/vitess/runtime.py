"""Where the Vitess programs, MySQL and etcd come from, and the unprivileged user that runs them.

The Vitess servers refuse to run as root, and a root test session or CI job must not run
database servers as root either. When this process is root, every Vitess process, mysqld and
etcd runs as a system user of its own (`SERVICE_USER`, created once with `useradd --system`);
otherwise they run as the current user. That user must be able to reach the programs, but the
build cache usually sits under root's home (mode 0700). So `stage` links the programs into the
cluster directory (hard links, a copy across file systems): `runtime/vt/bin` for Vitess and
`runtime/mysql` for a MySQL root laid out as `mysqlctl` expects (`bin/mysqld`, `share/`,
`lib/`). `mysqlctl shutdown` stops mysqld with `<root>/bin/mysqladmin ... shutdown`; MariaDB's
`mysqladmin` sends COM_SHUTDOWN, which MySQL 8.0 no longer knows ("Unknown command"), so that
program here is a small script that runs the SQL `SHUTDOWN` statement with MariaDB's `mariadb`
client and the same defaults file.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from updatestream_cli.devcluster.local_server import cache_dir
from updatestream_cli.vitess.errors import ServiceUserError, VitessToolsMissing

# Must match the vitess.io/vitess version pinned in tools/vitess/go.mod (a test checks it).
VITESS_VERSION = "v0.24.4"
MYSQL_VERSION = "8.0.31"
VITESS_PROGRAMS = ("vtctld", "vtctldclient", "vtgate", "vttablet", "mysqlctl")
SERVICE_USER = os.environ.get("UPDATESTREAM_VITESS_USER", "updatestream-vitess")
_CLIENT_PROGRAMS = ("/usr/bin/mariadb", "/usr/bin/mysql")
ETCD = "/usr/bin/etcd"


def vitess_bin_dir() -> Path:
    """The built Vitess programs: `UPDATESTREAM_VITESS_BIN`, else the build cache."""
    override = os.environ.get("UPDATESTREAM_VITESS_BIN")
    return Path(override) if override else cache_dir() / "vitess" / VITESS_VERSION / "bin"


def mysql_root() -> Path:
    """The MySQL 8.0 server installed by `scripts/install-mysql.sh` (`make mysql`)."""
    return cache_dir() / "mysql" / MYSQL_VERSION


def check_tools() -> None:
    """Refuse early, naming the command that installs what is missing."""
    missing = [p for p in VITESS_PROGRAMS if not os.access(vitess_bin_dir() / p, os.X_OK)]
    if missing:
        raise VitessToolsMissing(
            f"Vitess programs {', '.join(missing)} are not in {vitess_bin_dir()}; "
            "run `make vitess-tools` (scripts/build-vitess.sh) first"
        )
    if not os.access(mysql_root() / "bin" / "mysqld", os.X_OK):
        raise VitessToolsMissing(
            f"no MySQL {MYSQL_VERSION} server in {mysql_root()}; run `make mysql` "
            "(scripts/install-mysql.sh) first"
        )
    if not os.access(ETCD, os.X_OK):
        raise VitessToolsMissing(f"{ETCD} is missing; install Debian's etcd (make system-deps)")
    if client_program() is None:
        raise VitessToolsMissing(
            "no mariadb (or mysql) client program is installed; stopping mysqld needs it: "
            "install Debian's mariadb-client (make system-deps)"
        )


def client_program() -> str | None:
    return next((p for p in _CLIENT_PROGRAMS if os.access(p, os.X_OK)), None)


# `mysqlctl shutdown` runs `mysqladmin --defaults-extra-file=F --shutdown-timeout=N
# --connect-timeout=30 --wait=10 shutdown`.
_MYSQLADMIN = """#!/bin/sh
# mysqladmin for mysqlctl: MySQL 8.0 has no COM_SHUTDOWN, so run the SHUTDOWN statement.
defaults=""
command=""
for arg in "$@"; do
  case $arg in
    --defaults-extra-file=*) defaults=$arg ;;
    -*) ;;
    *) command=$arg ;;
  esac
done
if [ "$command" != shutdown ]; then
  echo "mysqladmin: only 'shutdown' is provided here, not '$command'" >&2
  exit 2
fi
exec {client} $defaults --connect-timeout=30 --batch -e SHUTDOWN
"""


@dataclass(frozen=True)
class ServiceUser:
    """The account the cluster's processes run as (uid/gid to switch to, or the caller's own)."""

    name: str
    uid: int
    gid: int
    home: str

    @property
    def switches(self) -> bool:
        return os.geteuid() == 0 and self.uid != 0

    def process_ids(self) -> tuple[int | None, int | None, list[int] | None]:
        """`subprocess` (user, group, extra_groups) that run a program as this user, with no
        other groups; all None when no switch is needed."""
        if not self.switches:
            return None, None, None
        return self.uid, self.gid, []

    def chown(self, path: Path, recursive: bool = True) -> None:
        """Give `path` (a file, or a whole tree unless `recursive` is off) to this user."""
        if not self.switches:
            return
        os.chown(path, self.uid, self.gid, follow_symlinks=False)
        if recursive and path.is_dir() and not path.is_symlink():
            for root, dirs, files in os.walk(path):
                for name in dirs + files:
                    os.chown(Path(root) / name, self.uid, self.gid, follow_symlinks=False)

    def check_reachable(self, path: Path) -> None:
        """Refuse a directory whose ancestors this user cannot traverse."""
        if not self.switches:
            return
        for ancestor in [*reversed(path.absolute().parents)]:
            mode = ancestor.stat()
            if mode.st_uid == self.uid or mode.st_mode & stat.S_IXOTH:
                continue
            if mode.st_gid == self.gid and mode.st_mode & stat.S_IXGRP:
                continue
            raise ServiceUserError(
                f"the cluster directory {path} is inside {ancestor} (mode "
                f"{stat.S_IMODE(mode.st_mode):04o}), which user {self.name} cannot enter; "
                "choose a directory it can reach, e.g. under /tmp or the repository"
            )


def service_user() -> ServiceUser:
    """The unprivileged user for the cluster: created if missing when running as root."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return ServiceUser(me.pw_name, me.pw_uid, me.pw_gid, me.pw_dir)
    with contextlib.suppress(KeyError):
        return _lookup(SERVICE_USER)
    cmd = [
        "useradd", "--system", "--user-group", "--no-create-home",
        "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
        "--comment", "UpdateStream local Vitess cluster", SERVICE_USER,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        return _lookup(SERVICE_USER)  # also when a concurrent run created it first
    except KeyError:
        raise ServiceUserError(
            f"cannot create the system user {SERVICE_USER} that runs Vitess (Vitess refuses to "
            f"run as root): `{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()}; "
            "create it by hand or set UPDATESTREAM_VITESS_USER to an existing unprivileged user"
        ) from None


def _lookup(name: str) -> ServiceUser:
    entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise ServiceUserError(f"user {name} has uid 0; Vitess needs an unprivileged user")
    grp.getgrgid(entry.pw_gid)
    return ServiceUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        shutil.copy2(src, dst)


def _mirror(src: Path, dst: Path) -> None:
    """Make `dst` hold the files of `src` (hard links), replacing an older mirror."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)


@dataclass(frozen=True)
class Runtime:
    """The staged programs of one cluster directory."""

    vt_bin: Path
    mysql_root: Path

    def program(self, name: str) -> str:
        return str(self.vt_bin / name)


def stage(runtime_dir: Path) -> Runtime:
    """Link the Vitess programs and the MySQL root into `runtime_dir` (readable by anyone)."""
    check_tools()
    runtime_dir.mkdir(parents=True, exist_ok=True)
    vt_bin = runtime_dir / "vt" / "bin"
    vt_bin.mkdir(parents=True, exist_ok=True)
    for name in VITESS_PROGRAMS:
        target = vt_bin / name
        source = vitess_bin_dir() / name
        if target.exists() and os.path.samefile(target, source):
            continue
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        _link_or_copy(str(source), str(target))
    mysql = runtime_dir / "mysql"
    marker = mysql / "bin" / "mysqld"
    if not (marker.exists() and os.path.samefile(marker, mysql_root() / "bin" / "mysqld")):
        _mirror(mysql_root(), mysql)
    admin = mysql / "bin" / "mysqladmin"
    script = _MYSQLADMIN.format(client=client_program())
    if not admin.exists() or admin.read_text() != script:
        admin.write_text(script)
        admin.chmod(0o755)
    for path in [runtime_dir, *runtime_dir.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return Runtime(vt_bin=vt_bin, mysql_root=mysql)
