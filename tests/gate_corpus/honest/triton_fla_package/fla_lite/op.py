import triton
import triton.language as tl
import triton.language.extra.libdevice as tldevice

exp = tldevice.fast_expf
log = tldevice.fast_logf
log1p = tldevice.log1p


@triton.jit
def softplus(x):
    return tl.where(x > 20.0, x, log1p(exp(x)))
