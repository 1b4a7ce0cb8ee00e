// GPU-initiated NIXL WRITE of a descriptor list: one warp per slice of a descriptor, each a warp-level nixlPut.
// The host cuts every descriptor into slices (index in the memory views, offset, length), so a KV block of
// 72 chunks is 72 warps and one 2.25 MiB range is as many warps as it has slices.
// Built on the GPU machine by scripts/gpu/build_device_put.sh against NIXL's and UCX's device headers;
// the bench's "device" path loads it (nixl-compat bench, NIXL_COMPAT_DEVICE_PUT_LIB).
#include <nixl_device.cuh>

#include <cstddef>
#include <cstdint>

namespace {

__global__ void
kv_put_kernel(nixlMemViewH local, nixlMemViewH remote, unsigned slices, const int64_t *plan, int *errors) {
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (warp >= slices) {
        return;
    }
    // plan: three rows of `slices` entries: view index, byte offset, byte length
    const auto index = static_cast<size_t>(plan[warp]);
    const auto offset = static_cast<size_t>(plan[slices + warp]);
    const auto length = static_cast<size_t>(plan[2 * slices + warp]);
    const nixlMemViewElem src{local, index, offset};
    const nixlMemViewElem dst{remote, index, offset};
    nixlGpuXferStatusH status;
    nixl_status_t rc = nixlPut<nixl_gpu_level_t::WARP>(src, dst, length, warp % 4, 0, &status);
    while (rc == NIXL_IN_PROG) {
        rc = nixlGpuGetXferStatus<nixl_gpu_level_t::WARP>(status);
    }
    if (rc != NIXL_SUCCESS && threadIdx.x % 32 == 0) {
        atomicAdd(errors, 1);
    }
}

} // namespace

// Returns the CUDA error of the launch (0: launched). `plan` and `errors` are device pointers.
extern "C" int
kv_device_put(uintptr_t local, uintptr_t remote, unsigned slices, const int64_t *plan, int *errors, void *stream) {
    constexpr unsigned threads = 256;
    const unsigned blocks = (slices * 32 + threads - 1) / threads;
    kv_put_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<nixlMemViewH>(local), reinterpret_cast<nixlMemViewH>(remote), slices, plan, errors);
    return static_cast<int>(cudaGetLastError());
}
