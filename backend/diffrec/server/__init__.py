"""The job server: a ROUTER socket in front of a durable job store and a one-job-per-device
queue. See docs/protocol.md for the wire protocol. ``app``: the socket and its loop;
``job_table``: the job table and lifecycle; ``runner``: the job-runner interface; ``registry``:
the runners a server offers; ``executor``: what runs the jobs, either ``worker`` /
``job_process`` (one job at a time, each in a child process) or ``cluster`` (jobs on a Ray
cluster, ``diffrec serve --cluster``)."""
