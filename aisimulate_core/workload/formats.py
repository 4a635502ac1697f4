"""The trace-format provider contract (hook ``aisimulate_register_trace_formats``).

A provider is a class with ``NAME`` (the payload's ``traffic.trace_format``) and a ``load``
method; the core instantiates it without arguments once per run::

    class MyFormat(TraceFormat):
        NAME = "my_format"

        def load(self, paths, *, trace_block_size):
            ...
            return Trace(trace_block_size, sessions)      # or an AgenticTrace

``paths`` are the payload's trace files as given (relative to the working directory); only
``dynamo`` may receive several. ``trace_block_size`` is the payload's value: 512 unless set,
or None for formats that embed their own block size (``dynamo``, ``weka``).

A format that needs traffic fields beyond those names them in ``TRAFFIC_OPTIONS`` (a tuple of
``traffic`` attribute names); the core passes each as a keyword of ``load``::

    class Weka(TraceFormat):
        NAME = "weka"
        TRAFFIC_OPTIONS = ("weka_nested_timestamp_basis",)

        def load(self, paths, *, trace_block_size, weka_nested_timestamp_basis=None):
            ...

``load`` parses and checks the rows: a bad row raises ``TraceError`` naming the file, the
line and the field ("trace.jsonl:3: output_length: is required"), and so does a file that
cannot be read ("trace.jsonl: cannot read the trace file: Permission denied"). Nothing else
may escape: the core reports a TraceError as one line. Read files as a stream (a row at a
time, never the whole file; the bundled formats cap a line at 64 MiB and a gzip file at
4 GiB inflated) and check every length against ``aisimulate_core.spec.bounds.MAX_TOKENS``
and every time against ``MAX_TIME_MS`` at load, so that no row can exhaust memory or
overflow later. It returns the core's model
(``workload.trace.Trace`` of sessions and turns, or ``workload.graph.AgenticTrace``) and does
nothing else: the core validates the model, normalizes starts, applies the speed-up and
chooses the driver.
"""

from __future__ import annotations


class TraceFormat:
    NAME = ""
    TRAFFIC_OPTIONS: tuple = ()

    def load(self, paths, *, trace_block_size):
        raise NotImplementedError


__all__ = ["TraceFormat"]
