"""The ncu CSV fixtures and texts shared by test_profile and test_profile_parse."""

from support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"
TRITON_CSV = FIXTURES / "synthetic_triton_example_sm90.csv"
CUDA_CORES_CSV = FIXTURES / "synthetic_flashinfer_cuda_cores_sm90.csv"
METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "l1tex__t_sector_hit_rate.pct", "dram__bytes_read.sum"]
PERMISSION_TEXT = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                   "Counters on the target device 0. For instructions on enabling permissions and to get more "
                   "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
