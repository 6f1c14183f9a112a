"""Measuring on a host, in one place: the probe table (probes.py), the stream protocol (stream.py), the
snapshots around a session (session.py), one launch (launch.py), the launch loop (probe.py), several
nodes of one host (nodes.py) and the summary (summary.py). `probe`, `ab`, `probe server`, `probe engine`
and bisect's lab measure through it; nothing below it imports it."""
