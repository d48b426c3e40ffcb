"""Layer markers: global module hooks that emit ``daydream.fwd:``/``daydream.bwd:`` ranges.

Forward ranges come from global forward pre-hooks and (always-called) forward
hooks.  Backward ranges do **not** use full backward hooks: those wrap every
module's inputs and outputs in an identity autograd function, which breaks
in-place ops on module outputs (``nn.ReLU(inplace=True)``) and costs an extra
autograd node per module.  Instead the forward hook attaches a pre-hook to the
autograd node that produced the module's output (backward of the module
*begins* when that node runs) and to the nodes that produced its inputs
(backward of the module *ends* when those run).  Ranges are kept as a stack;
an exit closes every younger range still open, and a callback queued on the
autograd engine closes whatever is left when the backward pass finishes, so
hooks that never fire (an input that needs no gradient) cannot leave ranges
dangling or crossed.

Module paths are assigned lazily: the first module called with no module
forward on the stack is a *root* and is named by its class (``MLP``); its
descendants get ``MLP.fc1``-style paths from ``named_modules``.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch.nn.modules import module as _nn_module

__all__ = ["LayerMarkers", "RangeHandle", "enter_range", "exit_range", "FWD_PREFIX", "BWD_PREFIX"]

FWD_PREFIX = "daydream.fwd:"
BWD_PREFIX = "daydream.bwd:"
_NAMES_ATTR = "_daydream_names"
_NODE_KEY = "_daydream_actions"

try:  # fast C++ record function (~1 us); the torch.ops form costs ~25 us
    from torch._C._profiler import _RecordFunctionFast as _FastRF
except ImportError:  # pragma: no cover - older torch
    _FastRF = None


class RangeHandle:
    """An open ``record_function`` range; pass it to :func:`exit_range`."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


def enter_range(name: str) -> RangeHandle:
    """Open a profiler range called ``name`` on the current thread."""
    if _FastRF is not None:
        rf = _FastRF(name)
        rf.__enter__()
        return RangeHandle(rf)
    return RangeHandle(torch.ops.profiler._record_function_enter_new(name, None))  # pragma: no cover


def exit_range(handle: RangeHandle) -> None:
    """Close a range opened by :func:`enter_range`."""
    if _FastRF is not None:
        handle.obj.__exit__(None, None, None)
    else:  # pragma: no cover
        torch.ops.profiler._record_function_exit._RecordFunction(handle.obj)


def _is_compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # pragma: no cover
        return False


def _tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


def _grad_nodes(value, out: list) -> list:
    """Distinct autograd nodes that produced the tensors in ``value`` (shallow)."""
    if isinstance(value, torch.Tensor):
        node = value.grad_fn
        if node is not None and all(node is not n for n in out):
            out.append(node)
    elif isinstance(value, (tuple, list)):
        for v in value[:8]:
            _grad_nodes(v, out)
    elif isinstance(value, dict):
        for v in list(value.values())[:8]:
            _grad_nodes(v, out)
    return out


@dataclass
class _BwdRange:
    """One module call's backward range (mutable state, not a value)."""

    name: str
    handle: RangeHandle | None = None


class _NodeActions:
    """Ranges to close and to open when one autograd node is about to run."""

    __slots__ = ("exits", "enters")

    def __init__(self):
        self.exits: list[_BwdRange] = []
        self.enters: list[_BwdRange] = []


class LayerMarkers:
    """Global module hooks emitting forward/backward ranges per module path.

    Parameters
    ----------
    record_output_bytes : bool
        Remember the size of each module's output (first call) for the
        module table.

    Notes
    -----
    Ranges are emitted only while :attr:`enabled` is true, so installed hooks
    cost one attribute check per module call outside recorded iterations.
    """

    def __init__(self, record_output_bytes: bool = True):
        self.enabled = False
        self.record_output_bytes = record_output_bytes
        self.output_bytes: dict[str, int] = {}
        self.forward_calls = 0
        self._roots: list[weakref.ref] = []
        self._root_names: set[str] = set()
        self._fwd_stack: list[tuple] = []
        self._open_bwd: list[_BwdRange] = []
        self._callback_queued = False
        self._handles: list = []

    # -- installation ------------------------------------------------------
    def install(self) -> None:
        """Register the global module hooks (idempotent)."""
        if self._handles:
            return
        self._handles = [
            _nn_module.register_module_forward_pre_hook(self._pre_hook),
            _nn_module.register_module_forward_hook(self._post_hook, always_call=True),
        ]

    def remove(self) -> None:
        """Unregister the hooks and close any range still open."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self.enabled = False
        self.close_all()

    def close_all(self) -> None:
        """Close every open forward and backward range (iteration end, abort)."""
        while self._open_bwd:
            self._exit_bwd(self._open_bwd.pop())
        while self._fwd_stack:
            handle = self._fwd_stack.pop()[1]
            if handle is not None:
                exit_range(handle)

    # -- module paths --------------------------------------------------------
    def roots(self) -> list:
        """Root modules seen so far (still alive), in first-call order."""
        return [m for m in (r() for r in self._roots) if m is not None]

    def _name_tree(self, module, path: str, overwrite: bool) -> None:
        for sub, m in module.named_modules(prefix=path):
            if overwrite or _NAMES_ATTR not in m.__dict__:
                m.__dict__[_NAMES_ATTR] = (FWD_PREFIX + sub, BWD_PREFIX + sub, sub)

    def _assign(self, module) -> tuple:
        if self._fwd_stack:
            parent = self._fwd_stack[-1][0]
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
        module.__dict__[_NAMES_ATTR] = (FWD_PREFIX + name, BWD_PREFIX + name, name)
        return module.__dict__[_NAMES_ATTR]

    # -- forward ------------------------------------------------------------
    def _pre_hook(self, module, args):
        if not self.enabled or _is_compiling():
            return None
        names = module.__dict__.get(_NAMES_ATTR) or self._assign(module)
        self.forward_calls += 1
        if torch._C._current_autograd_node() is not None:
            # activation-checkpoint recompute inside backward: belongs to the
            # enclosing backward range, so no forward range.
            self._fwd_stack.append((module, None, ()))
            return None
        in_nodes = _grad_nodes(args, []) if torch.is_grad_enabled() else ()
        self._fwd_stack.append((module, enter_range(names[0]), in_nodes))
        return None

    def _post_hook(self, module, args, output):
        stack = self._fwd_stack
        if not stack or stack[-1][0] is not module:
            return None
        _, handle, in_nodes = stack.pop()
        if handle is None:
            return None
        exit_range(handle)
        names = module.__dict__[_NAMES_ATTR]
        if self.record_output_bytes and names[2] not in self.output_bytes:
            self.output_bytes[names[2]] = _tensor_bytes(output)
        if self.enabled and torch.is_grad_enabled():
            self._attach_backward(names[1], in_nodes, _grad_nodes(output, []))
        return None

    # -- backward -----------------------------------------------------------
    def _attach_backward(self, bwd_name: str, in_nodes, out_nodes) -> None:
        out_nodes = [n for n in out_nodes if all(n is not i for i in in_nodes)]
        if not out_nodes:  # pass-through module (Identity): no backward of its own
            return
        rng = _BwdRange(bwd_name)
        for node in out_nodes:
            self._actions(node).enters.append(rng)
        for node in in_nodes:
            self._actions(node).exits.append(rng)

    def _actions(self, node) -> _NodeActions:
        meta = node.metadata
        actions = meta.get(_NODE_KEY)
        if actions is None:
            actions = meta[_NODE_KEY] = _NodeActions()
            node.register_prehook(self._make_prehook(actions))
        return actions

    def _make_prehook(self, actions: _NodeActions):
        def prehook(grad_outputs):
            if not self.enabled:
                return None
            if not self._callback_queued:
                self._callback_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            for rng in actions.exits:
                self._close(rng)
            # children registered before parents: open parents first
            for rng in reversed(actions.enters):
                if rng.handle is None:
                    rng.handle = enter_range(rng.name)
                    self._open_bwd.append(rng)
            return None

        return prehook

    def _close(self, rng: _BwdRange) -> None:
        if rng.handle is None:
            return
        while self._open_bwd:
            top = self._open_bwd.pop()
            self._exit_bwd(top)
            if top is rng:
                return

    @staticmethod
    def _exit_bwd(rng: _BwdRange) -> None:
        if rng.handle is not None:
            exit_range(rng.handle)
            rng.handle = None

    def _backward_done(self) -> None:
        self._callback_queued = False
        while self._open_bwd:
            self._exit_bwd(self._open_bwd.pop())
