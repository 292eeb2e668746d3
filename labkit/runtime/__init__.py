"""The environment labkit runs in, not the method: version floors and transformers' dialects
(``compat``), torch threads within a container's CPU quota (``cpu``), file hashes
(``hashing``), counts read from the environment or a command line (``counts``), and whether
this kernel writes a static copy of a notebook (``static``). Import from
the module (``from labkit.runtime.cpu import thread_budget``)."""
