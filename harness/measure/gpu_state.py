"""The state of a GPU before and after an evaluation, for the environment record.

Clocks, temperature, power and the driver's clock-event ("throttle") reasons explain a slow or noisy
measurement: a run whose card hit its power cap or a thermal limit is not comparable with one that
did not. Read through NVML (``pynvml``, from the nvidia-ml-py package), else by parsing
``nvidia-smi``; where neither exists the reading says so instead of failing.

Read only: nothing here changes clocks, power limits or any other setting of the card.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from typing import Any, Optional, Union

# NVML's clocks-event-reasons bitmask (nvmlClocksEventReason*), in bit order.
THROTTLE_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

# Reasons that lower clocks under load and so slow a kernel. Idle, application clocks and sync boost
# describe a setting or a quiet card, not a limit hit while measuring.
PERFORMANCE_THROTTLE_REASONS: frozenset[str] = frozenset({
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
})

NVIDIA_SMI_FIELDS = ["name", "uuid", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm",
                     "temperature.gpu", "power.draw", "clocks_event_reasons.active"]
# Drivers before 535 call the last field by its old name.
NVIDIA_SMI_FIELDS_OLD = NVIDIA_SMI_FIELDS[:-1] + ["clocks_throttle_reasons.active"]
NVIDIA_SMI_TIMEOUT_S = 15


def decode_throttle_reasons(mask: Union[int, str]) -> list[str]:
    """Bitmask (int, or nvidia-smi's hex string) -> reason names; unknown bits are named by value."""
    if isinstance(mask, str):
        mask = int(mask.strip(), 0)
    names = [name for name, bit in THROTTLE_REASON_BITS.items() if mask & bit]
    known = 0
    for bit in THROTTLE_REASON_BITS.values():
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"unknown_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


def _text(value: Any) -> str:
    # Old pynvml versions return bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_state(index: int) -> dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)

        def read(fn_name: str, *args: Any) -> Any:
            # A field the card does not report (power on some boards) is None, not a failed reading.
            try:
                return getattr(pynvml, fn_name)(*args)
            except Exception:
                return None

        power_mw = read("nvmlDeviceGetPowerUsage", handle)
        # The call was renamed in NVML 12.x ("throttle" -> "clocks event"); same bitmask.
        renamed = hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
        reasons_fn = ("nvmlDeviceGetCurrentClocksEventReasons" if renamed
                      else "nvmlDeviceGetCurrentClocksThrottleReasons")
        mask = read(reasons_fn, handle)
        name, uuid, driver = (read("nvmlDeviceGetName", handle), read("nvmlDeviceGetUUID", handle),
                              read("nvmlSystemGetDriverVersion"))
        return {
            "available": True,
            "source": "nvml",
            "index": index,
            "name": None if name is None else _text(name),
            "uuid": None if uuid is None else _text(uuid),
            "driver": None if driver is None else _text(driver),
            "sm_clock_mhz": read("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": read("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": read("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM),
            "temperature_c": read("nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "throttle_reasons": None if mask is None else decode_throttle_reasons(int(mask)),
        }
    finally:
        pynvml.nvmlShutdown()


def _number(text: str, kind: type) -> Optional[Union[int, float]]:
    # nvidia-smi writes "[N/A]" or "[Not Supported]" for fields a card does not report.
    text = text.strip()
    if not text or text.startswith("["):
        return None
    return kind(float(text)) if kind is int else kind(text)


def parse_nvidia_smi_csv(line: str, index: int = 0) -> dict[str, Any]:
    """One line of ``nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits``."""
    rows = list(csv.reader([line.strip()], skipinitialspace=True))
    fields = rows[0] if rows else []
    if len(fields) != len(NVIDIA_SMI_FIELDS):
        raise ValueError(f"nvidia-smi line has {len(fields)} fields, expected {len(NVIDIA_SMI_FIELDS)}: {line!r}")
    name, uuid, driver, sm, mem, max_sm, temp, power, reasons = (f.strip() for f in fields)
    return {
        "available": True,
        "source": "nvidia-smi",
        "index": index,
        "name": name,
        "uuid": uuid,
        "driver": driver,
        "sm_clock_mhz": _number(sm, int),
        "mem_clock_mhz": _number(mem, int),
        "max_sm_clock_mhz": _number(max_sm, int),
        "temperature_c": _number(temp, int),
        "power_w": _number(power, float),
        "throttle_reasons": None if reasons.startswith("[") else decode_throttle_reasons(reasons),
    }


def _nvidia_smi_state(index: int) -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise FileNotFoundError("nvidia-smi is not on PATH")
    errors = []
    for fields in (NVIDIA_SMI_FIELDS, NVIDIA_SMI_FIELDS_OLD):
        proc = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                               "-i", str(index)],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
        if proc.returncode == 0 and proc.stdout.strip():
            return parse_nvidia_smi_csv(proc.stdout.strip().splitlines()[0], index)
        errors.append(f"rc {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
    raise RuntimeError("nvidia-smi failed: " + "; ".join(errors))


def gpu_state(index: int = 0) -> dict[str, Any]:
    """Name, UUID, driver, clocks, temperature, power and active throttle reasons of GPU ``index``.

    Never raises: without NVML and nvidia-smi the answer is ``{"available": False, "reason": ...}``.
    """
    reasons = []
    for source, read in (("nvml", _nvml_state), ("nvidia-smi", _nvidia_smi_state)):
        try:
            return read(index)
        except Exception as err:  # ImportError, NVMLError, FileNotFoundError, timeouts, parse errors
            reasons.append(f"{source}: {type(err).__name__}: {err}")
    return {"available": False, "index": index, "reason": "; ".join(reasons)}


def throttled(before: dict[str, Any], after: dict[str, Any]) -> tuple[bool, list[str]]:
    """Whether either reading shows a reason that slows kernels, and which (in bit order)."""
    seen: set[str] = set()
    for state in (before, after):
        if state.get("available"):
            seen.update(r for r in state.get("throttle_reasons") or [] if r in PERFORMANCE_THROTTLE_REASONS)
    found = [name for name in THROTTLE_REASON_BITS if name in seen]
    return bool(found), found
