"""The `updatestream` console script and the tools behind it: demo, devcluster, verify."""
