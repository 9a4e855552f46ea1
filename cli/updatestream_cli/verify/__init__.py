"""The zero-loss verifier: the traffic ledger against what a sink received (`updatestream verify`).

:mod:`updatestream_cli.verify.compare` is the comparison over plain records;
:mod:`updatestream_cli.verify.sinks` reads each sink into those records;
:mod:`updatestream_cli.verify.cli` is the command.
"""
