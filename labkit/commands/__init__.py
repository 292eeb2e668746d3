"""The lab's commands that are not a method: the preflight check (``check``), the reference runs
the notebooks plot (``reference_runs``), the notebooks' timings (``section_times``), the speed
of the asynchronous modes against the synchronous trainer (``async_overlap``), the rebuilds of the shipped models (``build_tiny``, ``build_judge``, ``build_tools``) and where a
registered method's code lives (``where``) and a copy of the lab without the exercises' answers
(``student_copy``). Each has a
``main(argv)``; run it as ``python -m labkit <command>`` (``labkit/__main__.py`` lists them all).
"""
