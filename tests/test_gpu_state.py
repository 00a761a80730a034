"""GPU state readings: bitmask decoding, nvidia-smi parsing, a fake NVML, throttle verdicts, no GPU at all."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from harness.measure import gpu_state as gs
from harness.measure.gpu_state import decode_throttle_reasons, gpu_state, parse_nvidia_smi_csv, throttled

RECORDED_LINE = ("NVIDIA H200, GPU-08b07870-1dbe-46a5-935d-a35925a54318, 580.159.04, 1980, 3201, 1980, 41, 250.3, "
                 "0x0000000000000004")
H200_UUID = "GPU-08b07870-1dbe-46a5-935d-a35925a54318"


@pytest.mark.parametrize("mask,names", [
    (0x0, []),
    (0x1, ["gpu_idle"]),
    (0x2, ["applications_clocks_setting"]),
    (0x4, ["sw_power_cap"]),
    (0x8, ["hw_slowdown"]),
    (0x10, ["sync_boost"]),
    (0x20, ["sw_thermal_slowdown"]),
    (0x40, ["hw_thermal_slowdown"]),
    (0x80, ["hw_power_brake_slowdown"]),
    (0x100, ["display_clock_setting"]),
    (0x1FF, list(gs.THROTTLE_REASON_BITS)),
    (0x4 | 0x40, ["sw_power_cap", "hw_thermal_slowdown"]),
    (0x200 | 0x1, ["gpu_idle", "unknown_0x200"]),
    ("0x0000000000000004", ["sw_power_cap"]),
    ("0x0000000000000000", []),
    (" 0x21 ", ["gpu_idle", "sw_thermal_slowdown"]),
])
def test_decode_throttle_reasons(mask, names):
    assert decode_throttle_reasons(mask) == names


def test_parse_recorded_nvidia_smi_line():
    state = parse_nvidia_smi_csv(RECORDED_LINE)
    assert state == {
        "available": True, "source": "nvidia-smi", "index": 0,
        "name": "NVIDIA H200", "uuid": H200_UUID, "driver": "580.159.04",
        "sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "max_sm_clock_mhz": 1980,
        "temperature_c": 41, "power_w": 250.3, "throttle_reasons": ["sw_power_cap"],
    }


def test_parse_nvidia_smi_fields_a_card_does_not_report():
    line = "NVIDIA H200, GPU-x, 580.159.04, 1980, 3201, 1980, 41, [N/A], [Not Supported]"
    state = parse_nvidia_smi_csv(line, index=3)
    assert state["power_w"] is None and state["throttle_reasons"] is None and state["index"] == 3


def test_parse_nvidia_smi_wrong_field_count():
    with pytest.raises(ValueError, match="fields"):
        parse_nvidia_smi_csv("NVIDIA H200, GPU-x, 580.159.04")


def fake_pynvml(*, init_error: Exception | None = None, power_error: bool = False, bytes_strings: bool = False,
                old_reasons_name: bool = False) -> types.ModuleType:
    """A stand-in for pynvml that records its calls and returns the recorded H200's values."""
    m = types.ModuleType("pynvml")
    m.calls = []
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    text = (lambda s: s.encode()) if bytes_strings else (lambda s: s)

    def nvmlInit():
        m.calls.append("init")
        if init_error is not None:
            raise init_error

    def nvmlShutdown():
        m.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(i):
        m.calls.append(f"handle {i}")
        return ("handle", i)

    clocks = {m.NVML_CLOCK_SM: 1755, m.NVML_CLOCK_MEM: 3201}

    def nvmlDeviceGetPowerUsage(handle):
        if power_error:
            raise RuntimeError("NVMLError_NotSupported")
        return 612_345  # mW

    m.nvmlInit, m.nvmlShutdown, m.nvmlDeviceGetHandleByIndex = nvmlInit, nvmlShutdown, nvmlDeviceGetHandleByIndex
    m.nvmlDeviceGetName = lambda h: text("NVIDIA H200")
    m.nvmlDeviceGetUUID = lambda h: text(H200_UUID)
    m.nvmlSystemGetDriverVersion = lambda: text("580.159.04")
    m.nvmlDeviceGetClockInfo = lambda h, kind: clocks[kind]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: {m.NVML_CLOCK_SM: 1980, m.NVML_CLOCK_MEM: 3201}[kind]
    m.nvmlDeviceGetTemperature = lambda h, sensor: 67
    m.nvmlDeviceGetPowerUsage = nvmlDeviceGetPowerUsage
    reasons = lambda h: 0x4 | 0x20  # noqa: E731
    if old_reasons_name:
        m.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    else:
        m.nvmlDeviceGetCurrentClocksEventReasons = reasons
    return m


@pytest.mark.parametrize("bytes_strings", [False, True])
@pytest.mark.parametrize("old_reasons_name", [False, True])
def test_gpu_state_through_fake_nvml(monkeypatch, bytes_strings, old_reasons_name):
    fake = fake_pynvml(bytes_strings=bytes_strings, old_reasons_name=old_reasons_name)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    state = gpu_state(2)
    assert state == {
        "available": True, "source": "nvml", "index": 2,
        "name": "NVIDIA H200", "uuid": H200_UUID, "driver": "580.159.04",
        "sm_clock_mhz": 1755, "mem_clock_mhz": 3201, "max_sm_clock_mhz": 1980,
        "temperature_c": 67, "power_w": pytest.approx(612.345),
        "throttle_reasons": ["sw_power_cap", "sw_thermal_slowdown"],
    }
    assert fake.calls == ["init", "handle 2", "shutdown"]


def test_nvml_field_not_supported_is_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(power_error=True))
    state = gpu_state()
    assert state["available"] and state["power_w"] is None and state["sm_clock_mhz"] == 1755


class FakeRun:
    """subprocess.run stand-in: answers nvidia-smi with the recorded line (or fails the new field name)."""

    def __init__(self, reject_new_field: bool = False):
        self.commands: list[list[str]] = []
        self.reject_new_field = reject_new_field

    def __call__(self, cmd, **kwargs):
        self.commands.append(cmd)
        if self.reject_new_field and "clocks_event_reasons.active" in cmd[1]:
            return subprocess.CompletedProcess(cmd, 2, "", 'Field "clocks_event_reasons.active" is not a valid field')
        return subprocess.CompletedProcess(cmd, 0, RECORDED_LINE + "\n", "")


@pytest.mark.parametrize("reject_new_field", [False, True])
def test_falls_back_to_nvidia_smi_when_nvml_fails(monkeypatch, reject_new_field):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")))
    monkeypatch.setattr(gs.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    run = FakeRun(reject_new_field)
    monkeypatch.setattr(gs.subprocess, "run", run)
    state = gpu_state(1)
    assert state["source"] == "nvidia-smi" and state["index"] == 1
    assert state["uuid"] == H200_UUID and state["throttle_reasons"] == ["sw_power_cap"]
    assert run.commands[0][-2:] == ["-i", "1"]
    assert len(run.commands) == (2 if reject_new_field else 1)
    # Read-only: only --query-gpu, never a setting flag.
    assert all(c[1].startswith("--query-gpu=") and c[2] == "--format=csv,noheader,nounits" for c in run.commands)


def test_unavailable_without_nvml_and_nvidia_smi(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monkeypatch.setattr(gs.shutil, "which", lambda name: None)
    state = gpu_state()
    assert state["available"] is False
    assert "nvml: ModuleNotFoundError" in state["reason"] and "nvidia-smi" in state["reason"]


def test_unavailable_when_nvidia_smi_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(gs.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gs.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 9, "", "No devices were found"))
    state = gpu_state()
    assert state["available"] is False and "No devices were found" in state["reason"]


def state_with(*reasons: str) -> dict:
    return {"available": True, "throttle_reasons": list(reasons)}


@pytest.mark.parametrize("before,after,expected", [
    (state_with(), state_with(), (False, [])),
    (state_with("gpu_idle"), state_with("applications_clocks_setting", "sync_boost"), (False, [])),
    (state_with("display_clock_setting"), state_with(), (False, [])),
    (state_with("gpu_idle"), state_with("sw_power_cap"), (True, ["sw_power_cap"])),
    (state_with("hw_thermal_slowdown"), state_with(), (True, ["hw_thermal_slowdown"])),
    (state_with("hw_power_brake_slowdown", "hw_slowdown"), state_with("sw_thermal_slowdown", "hw_slowdown"),
     (True, ["hw_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"])),
    ({"available": False, "reason": "no GPU"}, {"available": False, "reason": "no GPU"}, (False, [])),
    ({"available": True, "throttle_reasons": None}, state_with("sw_power_cap"), (True, ["sw_power_cap"])),
])
def test_throttled(before, after, expected):
    assert throttled(before, after) == expected


def test_real_gpu_state_never_raises():
    state = gpu_state()
    assert isinstance(state["available"], bool)
    if not state["available"]:
        assert state["reason"]
