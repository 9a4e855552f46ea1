"""The kopf operator: thin handlers over a pure reconcile service."""
