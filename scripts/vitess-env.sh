# Sourced by the scripts that build or use the Vitess programs (after setting `repo`): the
# version tools/vitess/go.mod pins (empty when it pins none) and the directory
# scripts/build-vitess.sh (`make vitess-tools`) builds that version into.
VITESS_VERSION=$(awk '$1 == "vitess.io/vitess" { print $2; exit }' "$repo/tools/vitess/go.mod")
VITESS_BIN_DIR=${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}/vitess/$VITESS_VERSION/bin
