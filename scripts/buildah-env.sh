# Sourced by the image scripts: where buildah keeps its images and how it is called.
# buildah gets its own storage under the cache directory (so nothing else's images are touched
# and the layer cache survives `make clean`), runs build steps with runc (crun refuses a hybrid
# cgroup layout) and on the host network (so it creates no bridge or firewall rule).
cache_dir=${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}
BUILDAH_ROOT=$cache_dir/buildah/storage
BUILDAH_RUNROOT=$cache_dir/buildah/run
BASE_IMAGE=localhost/updatestream-base:bookworm
JRE_IMAGE=localhost/updatestream-jre:bookworm
PAUSE_IMAGE=localhost/updatestream-pause:1.0.0

bah() {
  buildah --root "$BUILDAH_ROOT" --runroot "$BUILDAH_RUNROOT" --storage-driver overlay "$@"
}
