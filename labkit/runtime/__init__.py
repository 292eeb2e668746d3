"""The environment labkit runs in, not the method: version floors and transformers' dialects
(``compat``), torch threads within a container's CPU quota (``cpu``), file hashes
(``hashing``), and counts read from the environment or a command line (``counts``). Import from
the module (``from labkit.runtime.cpu import thread_budget``)."""
