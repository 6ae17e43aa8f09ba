"""The optional mypyc build of the pure domain and codec: same sources, compiled, checked byte for byte.

Holds: ``loader`` (imported by every process: picks the build matching the sources, else pure Python),
``build`` (compiles into ``.cache/native/<digest>/`` and installs only if ``check`` agrees), ``check`` (the
corpus run through a build and through the pure sources). ``loader`` imports nothing of ``app``; ``build``
imports ``loader`` and runs ``check`` in a child interpreter; imports run one way.
"""
