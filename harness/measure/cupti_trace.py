"""CUPTI for the official timer: is it there, and the collector of one trial's activity records.

The timer (harness.measure.timing) enables GPU activity records (kernels, memcpy, memset on every stream) and the
runtime/driver API records whose correlation ids tie each activity to the call that launched it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .timing_records import ApiLaunch, GpuActivity, TimingError

# Bytes per CUPTI activity buffer handed out on request. A full buffer is delivered to Python on CUPTI's thread while
# the timed calls run, and that delivery takes the GIL from the thread launching them: a PyTorch callable of 1,000
# kernels per call read 52 ms per call with 8 MiB buffers (the official timer's size) and 26 ms with 64 MiB, its
# untraced wall being 30 ms (H200, benchmarks/timer_cost.py). A callable of a few kernels fills neither size within
# a trial, so its figure does not depend on this.
_CUPTI_BUFFER_BYTES = 64 * 1024 * 1024

# API calls that launch no GPU work: device, context, stream, function and error queries. PyTorch makes several per
# operator (cudaGetDevice, cudaGetLastError, cuDevicePrimaryCtxGetState, ...): 14 API records per kernel for a
# PyTorch attention on the H200. cupti-python hands every record to Python (about 12 us each) on a thread that takes
# the GIL from the launching one: that 1,000-kernel callable read 180 ms per timed call against 16 ms untraced, and a
# 27,000-record-per-call reference never finished its trial. Their records carry no GPU activity, so leaving them
# out changes no iteration's set of activities; the launch calls, copies, memsets and synchronisations are all still
# traced, and an activity whose launch record is missing is an error (``timing_records.unlaunched_activities``).
QUIET_RUNTIME_APIS = frozenset({
    "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount", "cudaGetDeviceFlags", "cudaGetDeviceProperties",
    "cudaDeviceGetAttribute", "cudaDeviceGetStreamPriorityRange", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cudaStreamGetPriority", "cudaStreamGetFlags",
    "cudaStreamGetId", "cudaStreamGetDevice", "cudaStreamQuery", "cudaEventQuery", "cudaPointerGetAttributes",
    "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cudaFuncGetName", "cudaGetFuncBySymbol",
    "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
    "cudaThreadExchangeStreamCaptureMode", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaMemGetInfo", "cudaDeviceCanAccessPeer",
})
QUIET_DRIVER_APIS = frozenset({
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxGetId",
    "cuCtxGetFlags", "cuCtxGetApiVersion", "cuCtxGetStreamPriorityRange", "cuDeviceGet", "cuDeviceGetCount",
    "cuDeviceGetAttribute", "cuDeviceGetName", "cuDeviceGetUuid", "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRetain", "cuDriverGetVersion", "cuGetProcAddress", "cuPointerGetAttribute",
    "cuPointerGetAttributes", "cuFuncGetAttribute", "cuFuncSetAttribute", "cuFuncGetName", "cuModuleGetFunction",
    "cuLibraryGetKernel", "cuLibraryGetModule", "cuKernelGetFunction", "cuKernelGetAttribute", "cuStreamGetCtx",
    "cuStreamGetId", "cuStreamGetFlags", "cuStreamGetPriority", "cuStreamIsCapturing", "cuStreamGetCaptureInfo",
    "cuStreamQuery", "cuEventQuery", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuOccupancyMaxPotentialBlockSize",
    # asked once per kernel launch while CUPTI traces (968 per call of a 968-launch PyTorch callable on the H200)
    "cuKernelGetName", "cuKernelGetParamInfo", "cuFuncGetParamInfo", "cuFuncGetModule", "cuFuncIsLoaded",
    "cuKernelGetLibrary", "cuModuleGetLoadingMode",
})
# Off only to compare with the official timer's full API trace (benchmarks/timer_cost.py).
QUIET_QUERIES = True


def api_base_name(member: str) -> str:
    """``cudaStreamGetCaptureInfo_v2_ptsz_v11030`` -> ``cudaStreamGetCaptureInfo``: a CUPTI callback id's API."""
    return re.split(r"_(?:v\d+|ptsz|ptds)(?=_|$)", member)[0]


def quiet_cbids(members: Iterable[tuple[str, int]], quiet: frozenset[str]) -> list[int]:
    """The callback ids, of ``(enum member name, id)`` pairs, whose API is one of ``quiet``."""
    return sorted({int(value) for name, value in members if api_base_name(name) in quiet})


def _load_cupti() -> tuple[Any | None, str | None]:
    """Return ``(cupti bindings module, None)`` or ``(None, reason it is unusable)``.

    The official timer requires cupti-python >= 13 (CUDA 13 activity records); older
    versions, or none, make it fall back to CUDA events.
    """
    try:
        from cupti import cupti as cupti_api  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a broken install failing at load time
        return None, f"cupti-python not importable ({type(exc).__name__}: {exc})"
    try:
        from importlib.metadata import version

        installed = version("cupti-python")
    except Exception as exc:
        return None, f"cupti-python version unknown ({type(exc).__name__}: {exc})"
    try:
        major = int(installed.split(".")[0])
    except ValueError:
        return None, f"cupti-python version {installed!r} not understood"
    if major < 13:
        return None, f"cupti-python {installed} < 13"
    return cupti_api, None


def cupti_status() -> tuple[bool, str]:
    """``(usable, description)``: whether the aligned CUPTI backend can run here."""
    module, reason = _load_cupti()
    if module is None:
        return False, reason or "cupti unavailable"
    from importlib.metadata import version

    return True, f"cupti-python {version('cupti-python')}"


class _CuptiCollector:
    """One trial's CUPTI session; all state lives on the instance, so nothing leaks from
    one ``time_trial`` call into the next."""

    def __init__(self, cupti_api: Any) -> None:
        self._api = cupti_api
        kinds = cupti_api.ActivityKind
        # GPU work on every stream, plus the API calls whose correlation ids tie that work
        # to the iteration that launched it (torch launches through the runtime API,
        # Triton and other JITs through the driver API, so both are needed).
        self._gpu_kinds = (kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET)
        self._api_kinds = (kinds.RUNTIME, kinds.DRIVER)
        self._kernel_kind = int(kinds.CONCURRENT_KERNEL)
        self._memcpy_kind = int(kinds.MEMCPY)
        self._memset_kind = int(kinds.MEMSET)
        self._gpu_kind_ids = {int(kind) for kind in self._gpu_kinds}
        self._api_kind_ids = {int(kind) for kind in self._api_kinds}
        self.activities: list[GpuActivity] = []
        self.launches: list[ApiLaunch] = []
        self._enabled: list[Any] = []
        self.quieted = 0  # API callback ids left untraced (QUIET_*_APIS); 0 where this CUPTI cannot

    # CUPTI asks for an empty buffer: (size in bytes, max records; 0 = as many as fit).
    def _buffer_requested(self) -> tuple[int, int]:
        return _CUPTI_BUFFER_BYTES, 0

    # CUPTI hands back a full buffer. The record objects view CUPTI-owned memory that is
    # reused after this returns, so copy out plain values now.
    def _buffer_completed(self, records: list) -> None:
        for record in records:
            kind = int(record.kind)
            if kind in self._gpu_kind_ids:
                self.activities.append(
                    GpuActivity(
                        int(record.start),
                        int(record.end),
                        int(record.correlation_id),
                        self._signature(kind, record),
                    )
                )
            elif kind in self._api_kind_ids:
                self.launches.append(
                    ApiLaunch(int(record.start), int(record.end), int(record.correlation_id))
                )

    def _signature(self, kind: int, record: Any) -> str:
        if kind == self._kernel_kind:
            return str(record.name)
        if kind == self._memcpy_kind:
            return f"[memcpy kind={int(record.copy_kind)} bytes={int(record.bytes)}]"
        return f"[memset bytes={int(record.bytes)} value={int(record.value)}]"

    def start(self) -> None:
        api = self._api
        try:
            # Buffers first, so no record produced right after enabling finds none.
            api.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            for kind in (*self._api_kinds, *self._gpu_kinds):
                api.activity_enable(kind)
                self._enabled.append(kind)
            if QUIET_QUERIES:
                self.quieted = self._quiet_queries()
        except Exception as exc:
            self.stop(flush=False)
            raise TimingError(
                f"could not start CUPTI activity tracing ({type(exc).__name__}: {exc}); "
                "is another profiler attached?"
            ) from exc

    def _quiet_queries(self) -> int:
        """Leave the query APIs' records out; where this CUPTI cannot, every API call stays traced."""
        api, done = self._api, 0
        for enum_name, enable, quiet in (("runtime_api_trace_cbid", "activity_enable_runtime_api", QUIET_RUNTIME_APIS),
                                          ("driver_api_trace_cbid", "activity_enable_driver_api", QUIET_DRIVER_APIS)):
            members, switch = getattr(api, enum_name, None), getattr(api, enable, None)
            if members is None or switch is None:
                continue
            for cbid in quiet_cbids(((m.name, m.value) for m in members), quiet):
                try:
                    switch(cbid, 0)
                    done += 1
                except Exception:  # an id this CUPTI does not know: it stays traced, which is always correct
                    continue
        return done

    def stop(self, *, flush: bool = True) -> None:
        """Deliver outstanding records, disable what we enabled and detach CUPTI, so a
        later trial (ours or FlashInfer's) starts from a clean CUPTI state."""
        api = self._api
        errors: list[str] = []
        if flush:
            try:
                # Everything was synchronized, so all records are complete: flag 0 (not
                # forced) delivers them without risking half-written records.
                api.activity_flush_all(0)
            except Exception as exc:
                errors.append(f"flush: {exc}")
        while self._enabled:
            kind = self._enabled.pop()
            try:
                api.activity_disable(kind)
            except Exception as exc:
                errors.append(f"disable {kind}: {exc}")
        try:
            api.finalize()
        except Exception as exc:
            errors.append(f"finalize: {exc}")
        if errors and flush:
            raise TimingError("CUPTI teardown failed: " + "; ".join(errors))

    def timestamp(self) -> int:
        return int(self._api.get_timestamp())
