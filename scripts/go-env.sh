# Sourced by the scripts that build Go programs: `find_go <script> <minimum version>` prints
# the Go toolchain to use ($GO, else `go` on PATH, else /usr/local/go/bin/go) or says what to
# install and fails.
find_go() {
  if [ -n "${GO:-}" ]; then echo "$GO"
  elif command -v go >/dev/null 2>&1; then echo go
  elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go
  else
    echo "$1: no Go toolchain found; install Go >= $2 or set GO=/path/to/go" >&2
    return 1
  fi
}
