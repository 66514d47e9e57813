"""Compiling ahead: a second process fills numba's disk cache with kernels this one is about to
call, so that a cold first step compiles on two cores instead of one.

Most kernels of a first step are known before the first of them runs: ember.jit lowers a
whole program (every fusion group's kernel, jit.py) before running it, and a fused op meets
its shapes a few calls before it compiles for them (launch.HOT). :func:`soon` hands such a
kernel — a numba dispatcher and the types of its arguments — to a *worker*: a fork of this
process, started when this process first compiles a kernel it handed over, that compiles the
kernels it is handed, newest first (the ones needed last), each into numba's disk cache. When this
process then calls the kernel, numba asks the dispatcher's ``compile``, which :func:`soon`
wrapped: if the worker has not started that kernel, it is compiled here as usual; if the worker
is compiling it, this process compiles other waiting kernels meanwhile, then loads what the
worker wrote, exactly as a warm process loads its cache. The machine code is the same whichever
process compiled it, so results never depend on who compiled what, or when.

Only where it can pay and is safe: on Linux (``os.fork``), where this process may use more than one CPU,
the kernel has a disk cache (``cache=True``) and the worker can find it by name. Everything
else compiles here, as without this module; so does a busy machine (see MODE).

>>> import numba, numpy as np
>>> @numba.njit            # no disk cache: nothing a worker could hand back
... def twice(x, out):
...     for i in range(x.size):
...         out[i] = 2 * x[i]
>>> soon(twice, np.ones(1), np.ones(1))
False
"""

from __future__ import annotations

import atexit
import importlib
import json
import mmap
import os
import signal
import struct
import sys
import time

#: ``EMBER_NUMBA_BACKGROUND``: "auto" (the default) starts the worker when a CPU looks idle (the
#: 1-minute load average at least half a CPU below the CPUs this process may use: on a busy
#: machine a worker only takes time slices from this process and stalls its threads); "1"
#: starts it whatever the load; "0" never.
MODE = os.environ.get("EMBER_NUMBA_BACKGROUND", "auto")
MAX_TASKS = 1 << 14  # tasks per process that can be handed over (one state byte each)
#: The worker runs at this process's priority (its work is this process's, done sooner), when a
#: CPU looks idle (MODE). Should it get little CPU all the same, this process waits for a kernel
#: the worker has started at most twice as long as its own last compile took (at least
#: WAIT_MIN_S), then compiles it here too: never much slower than compiling alone.
WAIT_MIN_S = 0.5
_WAIT = [WAIT_MIN_S]  # the wait limit now: twice this process's last compile of a handed kernel

# A task's state, one byte of memory shared with the worker.
FREE, HERE, THERE, DONE, FAILED = range(5)

_TASKS: dict = {}  # (id(dispatcher), argument types) -> task index
_LIST: list = []  # task index -> (dispatcher, argument types)
_OUTBOX: list = []  # messages not yet written to the worker
_WORKER: dict = {}  # owner (pid), pid, fd (the pipe's write end)
_STATE: list = []  # the shared state bytes (an anonymous mmap), made with the first task
STATS = {"handed": 0, "compiled_there": 0, "waited_s": 0.0}


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def available() -> bool:
    """Can kernels be compiled in a second process here?"""
    # Linux only: where it was tested (macOS's system libraries are not all safe across a fork).
    return MODE != "0" and sys.platform.startswith("linux") and _cpus() > 1


def idle() -> bool:
    """Does a CPU look free for the worker now (see MODE)?"""
    return MODE == "1" or os.getloadavg()[0] <= _cpus() - 0.5


def _spec(dispatcher):
    """How the worker finds ``dispatcher``: (file or module, name, twin?), or None."""
    from . import cache, launch

    f = dispatcher.py_func
    module = sys.modules.get(f.__module__)
    if module is None:
        return None
    if f.__module__.startswith(cache.PREFIX):
        return ("file", module.__file__, f.__name__, False)
    for kernel, twin in launch._TWINS.items():
        if twin is dispatcher:
            dispatcher, f = kernel, kernel.py_func
            module = sys.modules.get(f.__module__)
            return ("module", f.__module__, f.__name__, True) if getattr(module, f.__name__, None) is kernel else None
    return ("module", f.__module__, f.__name__, False) if getattr(module, f.__name__, None) is dispatcher else None


def soon(dispatcher, *args) -> bool:
    """Hand the compile of ``dispatcher`` for arguments like ``args`` (only their numba types
    count) to the worker. Returns whether it was handed over (or already was)."""
    if not available() or _WORKER.setdefault("owner", os.getpid()) != os.getpid():
        return False  # a fork of the process that owns the worker (a DataLoader's, say)
    from numba import typeof
    from numba.core.caching import NullCache

    argtypes = tuple(typeof(a) for a in args)
    key = (id(dispatcher), argtypes)
    if key in _TASKS:
        return True
    if argtypes in dispatcher.overloads or isinstance(dispatcher._cache, NullCache) or len(_LIST) >= MAX_TASKS:
        return False
    if _on_disk(dispatcher, argtypes):
        return False  # a warm cache: loading it here takes milliseconds, a fork more
    spec, names = _spec(dispatcher), _names(argtypes)
    if spec is None or names is None:
        return False
    message = json.dumps([len(_LIST), spec, names]).encode()
    if len(message) + 4 > 4096:  # one atomic pipe write (PIPE_BUF) per task
        return False
    if not _STATE:
        _STATE.append(mmap.mmap(-1, MAX_TASKS))
    _TASKS[key] = len(_LIST)
    _LIST.append((dispatcher, argtypes))
    _OUTBOX.append(struct.pack("<I", len(message)) + message)
    STATS["handed"] += 1
    if "compile" not in vars(dispatcher):
        original = type(dispatcher).compile
        dispatcher.compile = lambda sig, d=dispatcher: _compile(d, original, sig)
    if "fd" in _WORKER:
        _send()
    return True


def _names(argtypes):
    """``argtypes`` as plain data the worker turns back into the same numba types (arrays and
    scalars of NumPy dtypes: what kernels take), or None for any other type. Plain data, not
    pickles: the worker only ever builds types from dtype names."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    names = []
    for t in argtypes:
        try:
            if isinstance(t, types.Array):
                names.append([as_dtype(t.dtype).str, t.ndim, t.layout, not t.mutable, t.aligned])
            else:
                names.append([as_dtype(t).str])
        except Exception:  # not a NumPy dtype (a tuple, a record, None): compiled here
            return None
    return names if _types(names) == tuple(argtypes) else None


def _types(names):
    """The numba types :func:`_names` wrote."""
    import numpy as np
    from numba.core import types
    from numba.np.numpy_support import from_dtype

    out = []
    for n in names:
        dtype = from_dtype(np.dtype(n[0]))
        out.append(types.Array(dtype, n[1], n[2], readonly=n[3], aligned=n[4]) if len(n) > 1 else dtype)
    return tuple(out)


def _on_disk(dispatcher, argtypes) -> bool:
    """Does numba's disk cache hold ``dispatcher`` for ``argtypes`` (its index names it)?"""
    cache = dispatcher._cache
    try:
        key = cache._index_key(argtypes, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # numba's internals moved: hand it over, the worst is a wasted compile
        return False


# ------------------------------------------------------------------------------ this process
def _compile(dispatcher, original, sig):
    """The wrapped ``dispatcher.compile``: compile here, or wait for the worker and load."""
    from numba.core import sigutils

    args, _ = sigutils.normalize_signature(sig)
    i = _TASKS.get((id(dispatcher), tuple(args)))
    if i is None or _WORKER["owner"] != os.getpid():
        return original(dispatcher, sig)
    state = _STATE[0]
    if state[i] == FREE:
        state[i] = HERE
        _start()  # the worker takes the other tasks meanwhile
        t0 = time.perf_counter()
        try:
            return original(dispatcher, sig)
        finally:
            _WAIT[0] = max(WAIT_MIN_S, 2 * (time.perf_counter() - t0))
    t0 = time.perf_counter()
    while state[i] == THERE and _alive() and time.perf_counter() - t0 < _WAIT[0]:
        if not _help(state):
            time.sleep(0.001)
    STATS["waited_s"] += time.perf_counter() - t0
    STATS["compiled_there"] += state[i] == DONE
    return original(dispatcher, sig)  # numba's disk cache has it now, unless the worker failed


def _help(state) -> bool:
    """Compile the oldest task nobody has started (the one needed soonest), here."""
    for i, (dispatcher, argtypes) in enumerate(_LIST):
        if state[i] == FREE:
            state[i] = HERE
            try:
                type(dispatcher).compile(dispatcher, argtypes)
            except Exception:
                pass  # the call that needs it compiles it again and reports the error
            return True
    return False


def _alive() -> bool:
    pid = _WORKER.get("pid")
    if pid is None:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        done = pid
    if done:
        _WORKER.pop("pid")
    return not done


def _send():
    """Write what the worker has not been told yet, as far as the pipe takes it now."""
    while _OUTBOX:
        try:
            os.write(_WORKER["fd"], _OUTBOX[0])
        except BlockingIOError:
            return
        except OSError:  # the worker is gone: its tasks stay FREE and are compiled here
            _OUTBOX.clear()
            return
        _OUTBOX.pop(0)


def _start():
    """Fork the worker, once per process, holding numba's compiler lock (so that no other
    thread of this process is inside the compiler while the fork copies it)."""
    if "fd" in _WORKER or not _OUTBOX or not idle():
        return
    from numba.core.compiler_lock import global_compiler_lock

    read_end, write_end = os.pipe()
    with global_compiler_lock:
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            _work(read_end, _STATE[0])  # never returns
    os.close(read_end)
    os.set_blocking(write_end, False)
    _WORKER.update(pid=pid, fd=write_end)
    atexit.register(os.close, write_end)  # the worker reads the end of the pipe and exits
    _send()


# ------------------------------------------------------------------------------ the worker
def _work(fd, state):
    """The worker's life: compile the newest FREE task it was told of; exit when the pipe closes."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the process the user runs
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)  # a kernel that fails here fails again, with its message, in the parent
        known: dict = {}  # task index -> (spec, argument types)
        buffer = b""
        while True:
            os.set_blocking(fd, not any(state[i] == FREE for i in known))
            try:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
            except BlockingIOError:
                pass
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack("<I", buffer[:4])[0]:
                n = struct.unpack("<I", buffer[:4])[0]
                i, spec, names = json.loads(buffer[4 : 4 + n])
                known[i] = (spec, _types(names))
                buffer = buffer[4 + n :]
            free = [i for i in known if state[i] == FREE]
            if free:
                i = max(free)
                state[i] = THERE
                spec, argtypes = known.pop(i)
                state[i] = DONE if _compile_there(spec, argtypes) else FAILED
    finally:
        os._exit(0)


def _compile_there(spec, argtypes) -> bool:
    from . import cache, launch

    kind, where, name, twin = spec
    try:
        if kind == "file":
            with open(where) as f:
                module = cache.load(f.read())
        else:
            module = importlib.import_module(where)
        dispatcher = getattr(module, name)
        if twin:
            dispatcher = launch.for_work(dispatcher, 0)
        type(dispatcher).compile(dispatcher, argtypes)
        return True
    except Exception:
        return False
