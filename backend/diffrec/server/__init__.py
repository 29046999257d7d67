"""The job server: a ROUTER socket in front of a durable job store and a one-job-per-device
queue. See docs/protocol.md for the wire protocol and ``runner.py`` for the job-runner
interface."""
