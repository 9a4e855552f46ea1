"""The zero-loss verifier: the traffic ledger against what a sink received (`updatestream verify`).

:mod:`updatestream.verify.compare` is the comparison over plain records;
:mod:`updatestream.verify.sinks` reads each sink into those records;
:mod:`updatestream.verify.cli` is the command.
"""
