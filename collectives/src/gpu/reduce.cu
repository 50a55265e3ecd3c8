// meshrun's on-GPU reduction kernels: dst[i] = a[i] op b[i] for every element type and operation
// the collectives support, and the final divide of `avg`. The results must equal the CPU
// reduction (collectives/src/reduce.rs) bit for bit:
// - integers wrap (two's complement): arithmetic is done in the unsigned type of the same width;
// - float and double use one IEEE operation each (no contraction is possible in a single op;
//   division is compiled with -prec-div=true);
// - half and bfloat16 are widened to float (exact), combined, and rounded back to nearest-even,
//   exactly as the `half` crate does on the CPU.
// This file has no includes so that it compiles with NVRTC alone. It is compiled to
// reduce.ptx by scripts/gen-ptx; a test recompiles it and compares when NVRTC is present.

typedef signed char i8_t;
typedef unsigned char u8_t;
typedef int i32_t;
typedef unsigned int u32_t;
typedef long long i64_t;
typedef unsigned long long u64_t;
typedef unsigned short half_t;
typedef unsigned short bf16_t;

__device__ __forceinline__ float half_to_float(half_t h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ half_t float_to_half(float f) {
    half_t h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_float(bf16_t b) {
    return __uint_as_float(((u32_t)b) << 16);
}

// Round to nearest, ties to even; NaN stays NaN (quietened), as half::bf16::from_f32.
__device__ __forceinline__ bf16_t float_to_bf16(float f) {
    u32_t x = __float_as_uint(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
        return (bf16_t)((x >> 16) | 0x0040u);
    }
    const u32_t round_bit = 0x00008000u;
    if ((x & round_bit) != 0 && (x & (3 * round_bit - 1)) != 0) {
        return (bf16_t)((x >> 16) + 1);
    }
    return (bf16_t)(x >> 16);
}

// Integer operations in the unsigned type U of the same width, then back to T.
#define INT_OPS(T, U)                                                                  \
    __device__ __forceinline__ T sum_##T(T a, T b) { return (T)(U)((U)a + (U)b); }     \
    __device__ __forceinline__ T prod_##T(T a, T b) { return (T)(U)((U)a * (U)b); }    \
    __device__ __forceinline__ T min_##T(T a, T b) { return b < a ? b : a; }           \
    __device__ __forceinline__ T max_##T(T a, T b) { return b > a ? b : a; }           \
    __device__ __forceinline__ T div_##T(T a, u64_t n) { return (T)(a / (T)n); }

INT_OPS(i8_t, u8_t)
INT_OPS(u8_t, u8_t)
INT_OPS(i32_t, u32_t)
INT_OPS(u32_t, u32_t)
INT_OPS(i64_t, u64_t)
INT_OPS(u64_t, u64_t)

__device__ __forceinline__ float sum_float(float a, float b) { return a + b; }
__device__ __forceinline__ float prod_float(float a, float b) { return a * b; }
__device__ __forceinline__ float min_float(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float max_float(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float div_float(float a, u64_t n) { return a / (float)n; }

__device__ __forceinline__ double sum_double(double a, double b) { return a + b; }
__device__ __forceinline__ double prod_double(double a, double b) { return a * b; }
__device__ __forceinline__ double min_double(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ double max_double(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ double div_double(double a, u64_t n) { return a / (double)n; }

// 16-bit floats: widen, one float operation, round back.
#define SMALL_FLOAT_OPS(T, TO, FROM)                                                            \
    __device__ __forceinline__ T sum_##T(T a, T b) { return FROM(TO(a) + TO(b)); }              \
    __device__ __forceinline__ T prod_##T(T a, T b) { return FROM(TO(a) * TO(b)); }             \
    __device__ __forceinline__ T min_##T(T a, T b) { return FROM(fminf(TO(a), TO(b))); }        \
    __device__ __forceinline__ T max_##T(T a, T b) { return FROM(fmaxf(TO(a), TO(b))); }        \
    __device__ __forceinline__ T div_##T(T a, u64_t n) { return FROM(TO(a) / (float)n); }

SMALL_FLOAT_OPS(half_t, half_to_float, float_to_half)
SMALL_FLOAT_OPS(bf16_t, bf16_to_float, float_to_bf16)

// One kernel per (operation, type): meshrun_<op>_<type>(dst, a, b, n), grid-stride.
#define REDUCE_KERNEL(OP, T, NAME)                                                              \
    extern "C" __global__ void meshrun_##OP##_##NAME(T *dst, const T *a, const T *b, u64_t n) { \
        for (u64_t i = (u64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;                     \
             i += (u64_t)blockDim.x * gridDim.x) {                                              \
            dst[i] = OP##_##T(a[i], b[i]);                                                      \
        }                                                                                       \
    }

// The last step of avg: buf[i] /= nranks.
#define DIV_KERNEL(T, NAME)                                                                     \
    extern "C" __global__ void meshrun_div_##NAME(T *buf, u64_t n, u64_t nranks) {              \
        for (u64_t i = (u64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;                     \
             i += (u64_t)blockDim.x * gridDim.x) {                                              \
            buf[i] = div_##T(buf[i], nranks);                                                   \
        }                                                                                       \
    }

#define ALL_KERNELS(T, NAME)   \
    REDUCE_KERNEL(sum, T, NAME)  \
    REDUCE_KERNEL(prod, T, NAME) \
    REDUCE_KERNEL(min, T, NAME)  \
    REDUCE_KERNEL(max, T, NAME)  \
    DIV_KERNEL(T, NAME)

ALL_KERNELS(i8_t, int8)
ALL_KERNELS(u8_t, uint8)
ALL_KERNELS(i32_t, int32)
ALL_KERNELS(u32_t, uint32)
ALL_KERNELS(i64_t, int64)
ALL_KERNELS(u64_t, uint64)
ALL_KERNELS(half_t, half)
ALL_KERNELS(float, float)
ALL_KERNELS(double, double)
ALL_KERNELS(bf16_t, bfloat16)
