"""The pytest plugin behind the conformance suite (registered through the ``pytest11`` entry
point, so it is active in every pytest run but does nothing until conformance tests run).

    pytest --pyargs ember.conformance --ember-backend=numpy

Options: ``--ember-backend NAME`` (default ``$EMBER_BACKEND`` or numpy), ``--ember-require-available``
(an unavailable backend fails instead of skipping), ``--ember-backend-module MOD`` (import a
module, dotted name or ``.py`` path, before the run and register the backends its
``ember_backends()`` returns: how a backend that is not installed gets certified),
``--ember-tiers 0,1,2``, ``--ember-ops add,matmul``, ``--ember-dtypes float32,int64``, ``--ember-max-examples N`` (hypothesis
examples per op and dtype) and ``--ember-report FILE`` (the JSON that ``ember certify`` turns
into a certificate).

Skip reasons start with a tag the certificate sorts by: ``[undeclared]`` (the backend does not
declare the op or dtype), ``[unavailable]`` (cannot run here), ``[missing]`` (a part of ember or
a data set the tier needs is not there).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import platform
import sys
import time

import pytest

TAGS = ("undeclared", "unavailable", "missing")


def pytest_addoption(parser):
    group = parser.getgroup("ember", "ember backend conformance")
    group.addoption("--ember-backend", default=None, help="backend to certify (default: $EMBER_BACKEND or numpy)")
    group.addoption(
        "--ember-require-available",
        action="store_true",
        help="fail, instead of skipping, when the backend cannot run here",
    )
    group.addoption(
        "--ember-backend-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (dotted name or .py path) first and register its ember_backends()",
    )
    group.addoption("--ember-tiers", default=None, help="comma-separated tiers to run (default: all)")
    group.addoption("--ember-ops", default=None, help="comma-separated primitives / fused ops to run")
    group.addoption("--ember-dtypes", default=None, help="comma-separated dtypes to run (cases without one always run)")
    group.addoption(
        "--ember-max-examples", type=int, default=10, help="hypothesis examples per (op, dtype) in tier 2 (default 10)"
    )
    group.addoption(
        "--ember-seed",
        type=int,
        default=0,
        help="added to every seed tiers 3, 5 and 6 draw their inputs and weights from (default 0)",
    )
    group.addoption("--ember-report", default=None, metavar="FILE", help="write per-test results as JSON")


def _split(value):
    return None if not value else {v.strip() for v in value.split(",") if v.strip()}


def import_backend_module(spec: str):
    """Import a module by dotted name, ``.py`` file or package directory, and register the
    backends its ``ember_backends()`` hook returns (as if it were an installed plugin)."""
    if spec.endswith(".py") or os.sep in spec or os.path.isdir(spec):
        path = os.path.abspath(spec)
        if os.path.isdir(path):
            path = os.path.join(path, "__init__.py")
        stem = os.path.splitext(os.path.basename(path))[0]
        name = os.path.basename(os.path.dirname(path)) if stem == "__init__" else stem
        loader = importlib.util.spec_from_file_location(name, path)
        if loader is None or loader.loader is None or not os.path.exists(path):
            raise pytest.UsageError(f"--ember-backend-module: cannot import {spec!r}")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(spec)
    hook = getattr(module, "ember_backends", None)
    if callable(hook):
        import ember

        for info in hook():
            ember.register_backend(info)
    return module


def pytest_configure(config):
    config.addinivalue_line("markers", "ember_slow: a conformance test that takes seconds, not milliseconds")
    for spec in config.getoption("ember_backend_module") or []:
        import_backend_module(spec)
    config._ember_context = None
    config.pluginmanager.register(Recorder(config), "ember-conformance-recorder")


# ----------------------------------------------------------------------------- the context
class Context:
    """What every conformance test needs: the backend under test, what it declares, the
    reference backend and the run's options. One per session (the ``conformance`` fixture)."""

    def __init__(self, config):
        self.name = config.getoption("ember_backend") or os.environ.get("EMBER_BACKEND") or "numpy"
        self.require_available = config.getoption("ember_require_available")
        self.max_examples = config.getoption("ember_max_examples")
        self.seed = config.getoption("ember_seed") or 0
        self.facts: dict = {}  # what tiers learn for the certificate (tier 6: its data set)
        self.backend = None
        self.load_error = None
        self.available, self.reason = False, ""
        self._load()

    def _load(self):
        from ember.registry import REGISTRY

        REGISTRY.discover()
        info = REGISTRY.infos.get(self.name)
        if info is None:
            why = f" ({REGISTRY.problems[self.name]})" if self.name in REGISTRY.problems else ""
            self.load_error = (
                f"unknown backend {self.name!r}{why}; known: {', '.join(sorted(REGISTRY.infos))}. "
                f"Install its plugin, or load it with --backend-module (pytest: --ember-backend-module)"
            )
            return
        try:
            backend = REGISTRY.loaded.get(self.name) or info.load()
            ok, reason = backend.available()
        except Exception as exc:  # noqa: BLE001 - a broken backend is a finding, not a crash
            self.load_error = f"loading backend {self.name!r} raised {type(exc).__name__}: {exc}"
            return
        self.backend, self.available, self.reason = backend, bool(ok), str(reason)
        if ok:
            REGISTRY.loaded[self.name] = backend  # tensors made by name get this very object
            try:
                self._declare()
            except Exception as exc:  # noqa: BLE001
                self.load_error = f"capabilities() of {self.name!r} raised {type(exc).__name__}: {exc}"

    def _declare(self):
        from ember import dtypes as D
        from ember.conformance import fused_ops
        from ember.primitives import PRIMITIVES

        caps = self.caps = self.backend.capabilities()
        self.ops = frozenset(caps.ops)
        self.declared_dtype_names = frozenset(getattr(d, "name", str(d)) for d in caps.dtypes)
        # the storage dtypes (bfloat16, float8) and text are held, never computed in: no case draws them
        self.dtype_names = self.declared_dtype_names - {d.name for d in tuple(D.STORAGE) + D.TEXT}
        self.fused = frozenset(caps.fused)
        impls = dict(getattr(self.backend, "impls", {}) or {})
        fused_impls = dict(getattr(self.backend, "fused_impls", {}) or {})
        self.undeclared_impls = sorted(n for n in impls if n in PRIMITIVES and n not in self.ops)
        self.undeclared_fused = sorted(n for n in fused_impls if n in fused_ops() and n not in self.fused)
        self.grad_dtype = "float64" if "float64" in self.dtype_names else "float32"

    @property
    def reference(self):
        import ember

        return ember.get_backend("numpy")

    # -- the skips every tier shares ------------------------------------------------------------
    def require_usable(self):
        if self.load_error:
            pytest.fail(self.load_error, pytrace=False)
        if not self.available:
            msg = f"[unavailable] backend {self.name!r} cannot run here: {self.reason}"
            if self.require_available:
                pytest.fail(msg + " (--ember-require-available)", pytrace=False)
            pytest.skip(msg)

    def require_op(self, op):
        if op not in self.ops:
            impl = "implements it but " if op in getattr(self.backend, "impls", {}) else ""
            pytest.skip(f"[undeclared] backend {self.name!r} {impl}does not declare primitive {op!r}")

    def require_dtype(self, dtype):
        if dtype not in self.dtype_names:
            pytest.skip(f"[undeclared] backend {self.name!r} does not declare dtype {dtype}")

    def require_fused(self, name):
        if name not in self.fused:
            pytest.skip(
                f"[undeclared] backend {self.name!r} does not declare fused op {name!r} (ember runs the decomposition)"
            )

    # -- for the report -------------------------------------------------------------------------
    def meta(self) -> dict:
        import ember
        from ember.conformance import tolerances

        meta = {
            "backend": self.name,
            "ember_version": ember.__version__,
            "api_version": ember.API_VERSION,
            "available": self.available,
            "unavailable_reason": self.reason,
            "load_error": self.load_error,
            "tolerances": tolerances.table(),
            "seed": self.seed,
            "distribution": self.distribution(),
            **self.facts,
            "machine": {
                "platform": platform.platform(),
                "machine": platform.machine(),
                "processor": platform.processor(),
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
            },
        }
        try:
            import numpy

            meta["machine"]["numpy"] = numpy.__version__
        except ImportError:
            pass
        b = self.backend
        if b is not None:
            meta.update(
                backend_version=str(getattr(b, "version", "?")),
                backend_api_version=str(getattr(b, "api_version", "?")),
                backend_class=f"{type(b).__module__}.{type(b).__qualname__}",
                device=str(getattr(b, "device", "?")),
            )
        if hasattr(self, "caps"):
            meta.update(
                declared_ops=sorted(self.ops),
                declared_dtypes=sorted(self.declared_dtype_names),
                declared_fused=sorted(self.fused),
                devices=list(self.caps.devices),
                undeclared_implemented=self.undeclared_impls,
                undeclared_implemented_fused=self.undeclared_fused,
                grad_dtype=self.grad_dtype,
                notes={k: str(v) for k, v in self.caps.notes.items()},
            )
        return meta

    def distribution(self) -> dict | None:
        """The installed distribution that provides the backend (name, version), found through
        the entry point it came from or the package of its class. A backend that is not
        installed (a ``--backend-module`` file) has name and version None and the file as
        ``source``; None when no backend loaded."""
        from importlib import metadata

        from ember.registry import REGISTRY

        if self.backend is None:
            return None
        module = type(self.backend).__module__
        origin = REGISTRY.origin.get(self.name, "")
        for dist in metadata.distributions():
            for ep in dist.entry_points:
                if ep.group == "ember" and origin.startswith(f"{ep.name} ({ep.value})"):
                    return {"name": dist.metadata["Name"], "version": dist.version}
        top = module.split(".")[0]
        names = metadata.packages_distributions().get(top) or []
        if names:
            return {"name": names[0], "version": metadata.version(names[0])}
        return {"name": None, "version": None, "source": getattr(sys.modules.get(module), "__file__", None) or module}


def context(config) -> Context:
    if config._ember_context is None:
        config._ember_context = Context(config)
    return config._ember_context


@pytest.fixture(scope="session")
def ember_loaded(request):
    """The context, without insisting that the backend can run here (tier 0 checks that)."""
    return context(request.config)


@pytest.fixture(scope="session")
def conformance_session(request):
    return context(request.config)


@pytest.fixture
def conformance(conformance_session):
    """The context of a backend that loaded and is available (else the test skips or fails)."""
    conformance_session.require_usable()
    return conformance_session


# ----------------------------------------------------------------------------- collection
def _tier(item):
    module = getattr(item, "module", None)
    return getattr(module, "EMBER_TIER", None)


def _label(value):
    return getattr(value, "name", None) or (value if isinstance(value, (str, int)) else str(value))


def pytest_collection_modifyitems(session, config, items):
    tiers, ops = _split(config.getoption("ember_tiers")), _split(config.getoption("ember_ops"))
    dtypes = _split(config.getoption("ember_dtypes"))
    keep, drop = [], []
    for item in items:
        tier = _tier(item)
        if tier is None:
            keep.append(item)
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        op = params.get("op")
        info = {
            "tier": tier,
            "op": None if op is None else _label(op),
            "dtype": None if params.get("dtype") is None else _label(params["dtype"]),
            "test": item.originalname if hasattr(item, "originalname") else item.name,
        }
        for extra in ("order", "case"):
            if extra in params:
                info[extra] = _label(params[extra])
        item.user_properties.append(("ember", info))
        unwanted_op = ops is not None and op is not None and info["op"] not in ops
        unwanted_dtype = dtypes is not None and info["dtype"] is not None and info["dtype"] not in dtypes
        if (tiers is not None and str(tier) not in tiers) or unwanted_op or unwanted_dtype:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if any(_tier(item) is not None for item in keep):
        error = context(config).load_error or ""
        if error.startswith("unknown backend"):  # nothing would run: say so once
            raise pytest.UsageError(error)


# ----------------------------------------------------------------------------- results
def _message(report) -> str:
    if report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        return reason[len("Skipped: ") :] if reason.startswith("Skipped: ") else reason
    text = getattr(report, "ember_message", None)
    if text is None:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr)
        for prefix in (
            "AssertionError: ",
            "ember.conformance.watch.DisciplineError: ",
            "ember.conformance.watch.Nondeterminism: ",
        ):
            text = text.removeprefix(prefix)
    # keep the suite's own message: drop pytest's assertion replay and hypothesis's example dump
    for tail in ("\nassert ", "\nFalsifying example", "\nExplanation:"):
        text = text.split(tail)[0]
    return text if len(text) < 2000 else text[:2000] + " ..."


def _leaf(exc):
    """``(first exception, flaky)``: a group is reduced to its first exception, and flaky says
    whether it was hypothesis's FlakyFailure (the failing case passed when run again)."""
    flaky = False
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        flaky = flaky or "Flaky" in type(exc).__name__
        exc = exc.exceptions[0]
    return exc, flaky


def _culprit(exc) -> str | None:
    """The primitive an exception names as the cause (``exc.primitive``, as the watch's errors
    carry it; any tier's check may raise such an AssertionError), or None."""
    name = getattr(_leaf(exc)[0], "primitive", None)
    return str(name) if name else None


def _exception_message(exc) -> str:
    """The message of the exception a test failed with. A flaky failure is reported once, as
    its first exception's message, marked flaky (pytest's crash line would print the message
    twice, in the group's repr and in the assertion replay)."""
    exc, flaky = _leaf(exc)
    text = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
    if flaky:
        text = f"flaky (the failing case passed when run again: the backend is nondeterministic): {text}"
    return text


#: the tiers that run whole computations through ember.dispatch, so their tests run watched
WATCHED = (1, 3, 4, 5, 6)


class Recorder:
    """Collects one record per conformance test and writes them to ``--ember-report``. Tests
    of the WATCHED tiers run under a :class:`~ember.conformance.watch.Watch`, whose findings
    (the primitives the test used, the one whose output broke its rule, the call that raised)
    go into the test's record: the certificate's root-cause analysis reads them."""

    def __init__(self, config):
        self.config = config
        self.results = {}
        self.watched = {}
        self.started, self.started_cpu = time.time(), time.process_time()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        ctx = self.config._ember_context
        if _tier(item) not in WATCHED or ctx is None or ctx.backend is None or not ctx.available:
            yield
            return
        from ember import dispatch
        from ember.conformance.watch import Watch

        watch = Watch(ctx.backend)
        with dispatch.interpreting(watch):
            yield
        self.watched[item.nodeid] = watch

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed and call.excinfo is not None and _tier(item) is not None:
            report.ember_message = _exception_message(call.excinfo.value)
            report.ember_culprit = _culprit(call.excinfo.value)

    def _watch_findings(self, rec, nodeid):
        watch = self.watched.pop(nodeid, None)
        if watch is None:
            return
        rec["primitives"] = sorted(watch.used)
        if rec["outcome"] == "failed":
            rec["culprit"] = watch.culprit or rec.get("culprit")
            rec["failing_call"] = watch.failing

    def pytest_runtest_logreport(self, report):
        info = dict(report.user_properties).get("ember")
        if info is None:
            return
        rec = self.results.setdefault(
            report.nodeid, dict(info, nodeid=report.nodeid, outcome="passed", message="", duration=0.0)
        )
        rec["duration"] = round(rec["duration"] + report.duration, 4)
        if report.failed:
            if rec["outcome"] != "failed":
                rec["outcome"], rec["message"] = (
                    "failed",
                    (_message(report) if report.when == "call" else f"[{report.when} error] {_message(report)}"),
                )
        elif report.skipped and rec["outcome"] == "passed":
            rec["outcome"], rec["message"] = "skipped", _message(report)
        if report.failed and getattr(report, "ember_culprit", None):
            rec.setdefault("culprit", report.ember_culprit)
        if report.when == "call":
            self._watch_findings(rec, report.nodeid)

    def pytest_sessionfinish(self, session, exitstatus):
        config = self.config
        path = config.getoption("ember_report")
        if not path:
            return
        ctx = context(config)
        report = {
            "meta": dict(
                ctx.meta(),
                seconds=round(time.time() - self.started, 2),
                cpu_seconds=round(time.process_time() - self.started_cpu, 2),
                max_examples=ctx.max_examples,
                require_available=ctx.require_available,
                tiers_selected=sorted(_split(config.getoption("ember_tiers")) or []),
                ops_selected=sorted(_split(config.getoption("ember_ops")) or []),
                dtypes_selected=sorted(_split(config.getoption("ember_dtypes")) or []),
                pytest_exitstatus=int(exitstatus),
            ),
            "tests": list(self.results.values()),
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=str)
