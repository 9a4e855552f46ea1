#!/usr/bin/env bash
# After `make cluster-up`: adds the image just built and loaded into the node to the node's
# environment file, and says how to use both (the shell's KUBECONFIG and PATH, the image tag
# for helm). Printed once the node and the image are ready.
set -euo pipefail
# shellcheck source=scripts/cluster-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"

image=$(cat "$cache_dir/images/app.ref")
tag=${image##*:}
echo "export UPDATESTREAM_IMAGE_TAG=$tag" >>"$NODE_DIR/env"
cat <<EOF

The node runs, with the image $image loaded. In your shell:
  source ${NODE_DIR#"$repo"/}/env   # KUBECONFIG, the node's kubectl and helm first on PATH,
                                   # UPDATESTREAM_IMAGE_TAG=$tag
then install the operator with that image (docs/deploy.md, "A walkthrough"):
  helm install updatestream charts/updatestream-operator ... --set image.tag=\$UPDATESTREAM_IMAGE_TAG
EOF
