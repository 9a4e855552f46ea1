"""CLI command modules, one per area."""
