"""The environment labkit runs in, not the method: version floors and transformers' dialects
(``compat``), torch threads within a container's CPU quota (``cpu``), and file hashes
(``hashing``). Import from the module (``from labkit.runtime.cpu import thread_budget``)."""
