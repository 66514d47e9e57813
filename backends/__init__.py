"""The backends that ship with the core, one folder each: ``numpy`` (the reference), ``python``
(pure Python, for places without numpy such as Pyodide) and ``webgpu`` (WGSL shaders, in the
browser only). Each folder's ``__init__`` is an ``ember`` entry point implementing the
``ember_backends`` hook, exactly as a plugin's; the core never imports them."""
