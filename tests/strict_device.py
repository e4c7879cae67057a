"""A NumPy-backed stand-in for a GPU array library that is as strict as CuPy about the host.

Its arrays are not NumPy arrays: NumPy functions reach them only through the dispatch protocols
(``__array_ufunc__``, ``__array_function__``), and any implicit conversion to a host array
(``np.asarray``, ``np.ascontiguousarray``, ``float(x)``) raises, as CuPy's does. Running the
executor's device path on it catches the host round trips that only a real GPU would otherwise
reveal. Install it as ``cupy`` (``sys.modules``) so ``taso.ops.base.array_module`` finds it.
"""

from __future__ import annotations

import math
import time
import types

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class DeviceArray(NDArrayOperatorsMixin):
    """An array 'on the device': the data is NumPy's, the host cannot see it without ``get()``."""

    __cuda_array_interface__ = {}  # what taso's is_device_array looks for

    def __init__(self, data: np.ndarray):
        self._data = data

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly.")

    def __float__(self):
        raise TypeError("implicit conversion of a device array to a Python scalar")

    __int__ = __index__ = __bool__ = __float__

    def get(self) -> np.ndarray:
        return self._data.copy()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = getattr(ufunc, method)(*_host(inputs), **_host(kwargs))
        return _device(out)

    def __array_function__(self, func, types_, args, kwargs):
        return _device(func(*_host(args), **_host(kwargs)))

    def __getitem__(self, key):
        return _device(self._data[_host(key)])

    def __len__(self):
        return len(self._data)

    def __iter__(self):
        return (_device(x) for x in self._data)

    def __repr__(self):
        return f"DeviceArray({self._data!r})"

    def __getattr__(self, name):
        if name.startswith("__"):  # no __array_interface__ / __array_struct__: the host must not read the data
            raise AttributeError(name)
        value = getattr(self._data, name)
        if callable(value):
            return lambda *a, **k: _device(value(*_host(a), **_host(k)))
        return _device(value)


def _host(value):
    if isinstance(value, DeviceArray):
        return value._data
    if isinstance(value, tuple):
        return tuple(_host(v) for v in value)
    if isinstance(value, list):
        return [_host(v) for v in value]
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    return value


def _device(value):
    if isinstance(value, np.ndarray):
        return DeviceArray(value)
    if isinstance(value, np.generic):  # CuPy's reductions return 0-d device arrays, not host scalars
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_device(v) for v in value)
    if isinstance(value, list):
        return [_device(v) for v in value]
    return value


def _asarray(value, dtype=None):
    if isinstance(value, DeviceArray):
        return value if dtype is None else value.astype(dtype)
    return DeviceArray(np.asarray(value, dtype))


def _module_function(name):
    fn = getattr(np, name)
    return lambda *a, **k: _device(fn(*_host(a), **_host(k)))


class _Module(types.ModuleType):
    """``cupy``: asarray copies to the 'device'; other names are NumPy's, on device arrays."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _module_function(name)


class _Event:
    """A CUDA event read from the host clock (the work it brackets already ran: nothing here is asynchronous)."""

    def record(self) -> None:
        self.seconds = time.perf_counter()

    def synchronize(self) -> None:
        pass


class _Device:
    id = 0

    def synchronize(self) -> None:
        pass


def _cuda() -> types.SimpleNamespace:
    """``cupy.cuda``: one 'GPU' named for what it is."""
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"strict host stand-in"},
                                    driverGetVersion=lambda: 0, runtimeGetVersion=lambda: 0)
    return types.SimpleNamespace(runtime=runtime, Device=_Device, Event=_Event,
                                 get_elapsed_time=lambda start, end: (end.seconds - start.seconds) * 1e3)


def make_module() -> types.ModuleType:
    module = _Module("cupy")
    module.__version__ = "strict-stand-in"
    module.cuda = _cuda()
    module.asarray = _asarray
    module.ndarray = DeviceArray
    module.asnumpy = lambda a: a.get() if isinstance(a, DeviceArray) else np.asarray(a)
    return module


def make_cupyx() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """``cupyx``, ``cupyx.scipy`` and ``cupyx.scipy.special`` with erf (all the executor asks of them)."""
    erf = np.vectorize(math.erf, otypes=[np.float64])
    special = types.ModuleType("cupyx.scipy.special")
    special.erf = lambda x: _device(erf(_host(x)))
    scipy = types.ModuleType("cupyx.scipy")
    scipy.special = special
    cupyx = types.ModuleType("cupyx")
    cupyx.scipy = scipy
    return cupyx, scipy, special
