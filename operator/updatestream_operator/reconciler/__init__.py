"""The pure reconciler: data in, one decision out; no kopf, no Kubernetes client."""
