"""The backends that ship with the core: ``numpy`` (the reference) and ``python`` (pure
Python, for places without numpy such as Pyodide). They register through the same
``ember_backends`` hook as any plugin."""
