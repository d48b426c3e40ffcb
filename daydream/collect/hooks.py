"""Layer markers: a wrapper of ``nn.Module.__call__`` that emits ``daydream.fwd:``/``daydream.bwd:`` ranges.

Forward ranges open before each module call and close after it (also when it
raises); the wrapper, unlike global module hooks, keeps ``nn.Module``'s fast
path for calls outside recorded iterations; inside, a call costs a range and
some bookkeeping (8 us without a profiler, 16 us under one, on the CI VM).

Backward ranges are optional (``backward_ranges``; off by default: ~15 us per
module call, and the loader maps backward ops to modules by autograd sequence
number without them).  They do **not** use full backward hooks: those wrap every
module's inputs and outputs in an identity autograd function, which breaks
in-place ops on module outputs (``nn.ReLU(inplace=True)``) and costs an extra
autograd node per module.  Instead the wrapper, after the forward, attaches a pre-hook to the
autograd node that produced the module's output: the module's backward
*begins* when that node runs.  Open backward ranges form a stack; when a
module's backward begins, every open range that is not one of its ancestors
(by path) has ended and is closed, and a callback queued on the autograd
engine closes whatever is left when the backward pass finishes.  So ranges
always nest, whatever fires or not; autograd ops between two modules (a
residual add) are attributed to the module whose backward ran just before.

Module paths are assigned lazily: the first module called with no module
forward on the stack is a *root* and is named by its class (``MLP``); its
descendants get ``MLP.fc1``-style paths from ``named_modules``.
"""
from __future__ import annotations

import threading
import weakref

import torch

__all__ = ["LayerMarkers", "enter_range", "exit_range", "FWD_PREFIX", "BWD_PREFIX"]

FWD_PREFIX = "daydream.fwd:"
BWD_PREFIX = "daydream.bwd:"
_NAMES_ATTR = "_daydream_names"
_NODE_KEY = "_daydream_actions"

try:  # fast C++ record function (~1 us); the torch.ops form costs ~25 us
    from torch._C._profiler import _RecordFunctionFast as _FastRF
except ImportError:  # pragma: no cover - older torch
    _FastRF = None


def enter_range(name: str):
    """Open a profiler range called ``name`` on the current thread; returns its handle."""
    if _FastRF is not None:
        rf = _FastRF(name)
        rf.__enter__()
        return rf
    return torch.ops.profiler._record_function_enter_new(name, None)  # pragma: no cover


def exit_range(handle) -> None:
    """Close a range opened by :func:`enter_range`."""
    if _FastRF is not None:
        handle.__exit__(None, None, None)
    else:  # pragma: no cover
        torch.ops.profiler._record_function_exit._RecordFunction(handle)


def _is_compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # pragma: no cover
        return False


def _names(path: str) -> tuple[str, str, str, str]:
    """(forward range name, backward range name, path, descendant prefix)."""
    return (FWD_PREFIX + path, BWD_PREFIX + path, path, path + ".")


def _tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


class _BwdRange:
    """One module call's backward range (mutable state, not a value)."""

    __slots__ = ("name", "path", "prefix", "handle")

    def __init__(self, names: tuple):
        self.name, self.path, self.prefix = names[1], names[2], names[3]
        self.handle = None


def _first_grad_node(value):
    """The autograd node of the first tensor in ``value`` that has one (shallow)."""
    if isinstance(value, torch.Tensor):
        return value.grad_fn
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for v in value[:8]:
            if isinstance(v, torch.Tensor) and v.grad_fn is not None:
                return v.grad_fn
    return None


class _PerThread(threading.local):
    """Forward stack and open backward ranges of one thread (DataParallel replicas,
    autograd device threads)."""

    def __init__(self, owner: "LayerMarkers"):
        self.fwd_stack: list[tuple] = []
        self.open_bwd: list[_BwdRange] = []
        owner._all_open_bwd.append(self.open_bwd)


class LayerMarkers:
    """Global module hooks emitting forward/backward ranges per module path.

    Parameters
    ----------
    record_output_bytes : bool
        Remember the size of each module's output (first call) for the
        module table.
    backward_ranges : bool
        Also emit ``daydream.bwd:`` ranges (a pre-hook on the autograd node
        that produced each module's output).

    Notes
    -----
    Ranges are emitted only while :attr:`enabled` is true, so the installed
    wrapper costs a Python call and an attribute check per module call
    outside recorded iterations.
    """

    def __init__(self, record_output_bytes: bool = True, backward_ranges: bool = False):
        self.enabled = False
        self.record_output_bytes = record_output_bytes
        self.backward_ranges = backward_ranges
        self.output_bytes: dict[str, int] = {}
        #: shapes of the tensor arguments of each root module's first call (the batch)
        self.input_shapes: dict[str, list] = {}
        #: (path, shapes of the tensor arguments) of every root module call since
        #: :meth:`take_root_inputs`
        self.root_inputs: list[tuple] = []
        self._roots: list[weakref.ref] = []
        self._root_names: set[str] = set()
        self._all_open_bwd: list[list] = []  # every thread's open backward ranges
        self._local = _PerThread(self)
        self._callback_queued = False
        self._orig_call = None   # nn.Module.__call__ before install()
        #: called once with the exception when a hook fails; the markers are then inert
        self.on_error = None
        self.failed = False
        self._pending = None

    def _guard(self, fn):
        """``fn`` (a backward-pass hook) wrapped so that an exception never reaches the user's model.

        The failure is reported later (:meth:`report_pending`): inside a
        backward pass, a profiler stopped by the owner would be re-enabled
        when the autograd engine restores the thread's state.
        """
        def guarded(*args):
            if self.failed:
                return None
            try:
                return fn(*args)
            except Exception as exc:  # noqa: BLE001 - a profiler must never break training
                self._hook_failed(exc)
                return None
        return guarded

    def _hook_failed(self, exc: BaseException) -> None:
        self.failed = True
        self.enabled = False
        self._pending = exc

    def report_pending(self) -> None:
        """Tell ``on_error`` about a hook failure not told yet (call outside any backward pass)."""
        exc, self._pending = self._pending, None
        if exc is not None and self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # noqa: BLE001
                pass

    # -- installation ------------------------------------------------------
    def install(self) -> None:
        """Wrap ``nn.Module.__call__`` with the markers (idempotent).

        A wrapper, not global module hooks: any global hook sends every module
        call down ``nn.Module``'s slow path, which alone cost 9-11 us a call
        on this project's CPU machine, the wrapper 0.4-3 us while off
        (``benchmarks/trace_overhead_parts.py --hooks-only``).  The
        wrapper calls :meth:`_pre_hook` and :meth:`_post_hook` as the hooks
        would (forward-hook ``always_call`` semantics: also when the forward
        raises).
        """
        if self._orig_call is not None:
            return
        orig = self._orig_call = torch.nn.Module.__call__
        markers = self
        pre, post = self._pre_hook, self._post_hook    # bound now (tests replace them before)

        def __call__(module, *args, **kwargs):
            if _is_compiling() or not markers.enabled:
                if markers._pending is not None and torch._C._current_autograd_node() is None:
                    markers.report_pending()     # a failure inside the last backward pass
                return orig(module, *args, **kwargs)
            try:
                pre(module, args)
            except Exception as exc:  # noqa: BLE001 - a profiler must never break training
                markers._hook_failed(exc)
                return orig(module, *args, **kwargs)
            try:
                output = orig(module, *args, **kwargs)
            except BaseException:
                try:
                    markers._close_forward(module)
                except Exception as exc:  # noqa: BLE001 - the model's own exception goes on
                    markers._hook_failed(exc)
                raise
            try:
                post(module, output)
            except Exception as exc:  # noqa: BLE001
                markers._hook_failed(exc)
            return output

        __call__._daydream_markers = self
        torch.nn.Module.__call__ = __call__

    def remove(self) -> None:
        """Restore ``nn.Module.__call__`` and close any range still open."""
        if self._orig_call is not None:
            if getattr(torch.nn.Module.__call__, "_daydream_markers", None) is self:
                torch.nn.Module.__call__ = self._orig_call
            self._orig_call = None
        self.enabled = False
        self.close_all()

    def close_all(self) -> None:
        """Close every open forward and backward range (iteration end, abort)."""
        self._backward_done()
        stack = self._local.fwd_stack
        while stack:
            handle = stack.pop()[1]
            if handle is not None:
                exit_range(handle)

    def take_root_inputs(self) -> list[tuple]:
        """The root module calls' inputs logged since the last call (and clear the log)."""
        out, self.root_inputs = self.root_inputs, []
        return out

    # -- module paths --------------------------------------------------------
    def roots(self) -> list:
        """Root modules seen so far (still alive), in first-call order."""
        return [m for m in (r() for r in self._roots) if m is not None]

    def _name_tree(self, module, path: str, overwrite: bool) -> None:
        for sub, m in module.named_modules(prefix=path):
            if overwrite or _NAMES_ATTR not in m.__dict__:
                m.__dict__[_NAMES_ATTR] = _names(sub)

    def _assign(self, module) -> tuple:
        if self._local.fwd_stack:
            parent = self._local.fwd_stack[-1][0]
            self._name_tree(parent, parent.__dict__[_NAMES_ATTR][2], overwrite=False)
            names = module.__dict__.get(_NAMES_ATTR)
            if names is not None:
                return names
        base = type(module).__name__
        name, k = base, 1
        while name in self._root_names:
            k += 1
            name = f"{base}#{k}"
        self._root_names.add(name)
        self._roots.append(weakref.ref(module))
        self._name_tree(module, name, overwrite=False)
        module.__dict__[_NAMES_ATTR] = _names(name)
        return module.__dict__[_NAMES_ATTR]

    # -- forward ------------------------------------------------------------
    def _pre_hook(self, module, args) -> None:
        """Before a module call: open its forward range (kept minimal: it runs per module call)."""
        names = module.__dict__.get(_NAMES_ATTR) or self._assign(module)
        stack = self._local.fwd_stack
        if torch._C._current_autograd_node() is not None:
            # activation-checkpoint recompute inside backward: belongs to the
            # enclosing backward range, so no forward range.
            stack.append((module, None, None))
            return
        in_node = None
        if self.backward_ranges and args and isinstance(args[0], torch.Tensor):
            in_node = args[0].grad_fn
        if not stack:
            shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
            self.input_shapes.setdefault(names[2], shapes)
            self.root_inputs.append((names[2], shapes))
        stack.append((module, enter_range(names[0]), in_node))

    def _close_forward(self, module) -> None:
        """Close ``module``'s forward range if it is the innermost one (its forward raised)."""
        stack = self._local.fwd_stack
        if stack and stack[-1][0] is module:
            handle = stack.pop()[1]
            if handle is not None:
                exit_range(handle)

    def _post_hook(self, module, output) -> None:
        """After a module call: close its range; with backward ranges, arm its backward."""
        stack = self._local.fwd_stack
        if not stack or stack[-1][0] is not module:
            return None
        _, handle, in_node = stack.pop()
        if handle is None:
            return None
        exit_range(handle)
        names = module.__dict__[_NAMES_ATTR]
        if self.record_output_bytes and names[2] not in self.output_bytes:
            self.output_bytes[names[2]] = _tensor_bytes(output)
        if not self.backward_ranges:
            return None
        node = _first_grad_node(output)
        if node is None or node is in_node or not self.enabled:
            return None  # no grad, or a pass-through module (Identity) with no backward of its own
        meta = node.metadata
        enters = meta.get(_NODE_KEY)
        if enters is None:
            enters = meta[_NODE_KEY] = []
            node.register_prehook(self._make_prehook(enters))
        enters.append(_BwdRange(names))
        return None

    # -- backward -----------------------------------------------------------
    def _make_prehook(self, enters: list):
        def prehook(grad_outputs):
            if not self.enabled:
                return None
            if not self._callback_queued:
                self._callback_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._guard(self._backward_done))
            open_ = self._local.open_bwd
            # children registered before parents: open parents first
            for rng in reversed(enters):
                # the module's backward begins: ranges of modules that are not
                # its ancestors have finished
                while open_ and not rng.path.startswith(open_[-1].prefix):
                    self._exit_bwd(open_.pop())
                rng.handle = enter_range(rng.name)
                open_.append(rng)
            return None

        return self._guard(prehook)

    @staticmethod
    def _exit_bwd(rng: _BwdRange) -> None:
        if rng.handle is not None:
            exit_range(rng.handle)
            rng.handle = None

    def _backward_done(self) -> None:
        self._callback_queued = False
        for open_ in self._all_open_bwd:
            while open_:
                self._exit_bwd(open_.pop())
