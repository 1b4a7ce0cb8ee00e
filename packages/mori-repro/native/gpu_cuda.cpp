// CUDA driver API backend. Prototypes and enum values are declared here, matching cuda.h,
// so the program builds without the CUDA toolkit.
#include <unistd.h>

#include <string>

#include "dl.hpp"
#include "gpu.hpp"

namespace mr {
namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124;
constexpr int CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1;

struct CudaApi {
    CUresult (*init)(unsigned int);
    CUresult (*driver_get_version)(int*);
    CUresult (*device_get)(CUdevice*, int);
    CUresult (*device_get_count)(int*);
    CUresult (*device_get_name)(char*, int, CUdevice);
    CUresult (*device_get_attribute)(int*, int, CUdevice);
    CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
    CUresult (*primary_ctx_release)(CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*mem_alloc)(CUdeviceptr*, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t);
    CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t);
    CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr);
    CUresult (*get_handle_for_address_range)(void*, CUdeviceptr, size_t, int, unsigned long long);
    CUresult (*get_error_name)(CUresult, const char**);
};

std::string describe_result(const CudaApi& api, CUresult r) {
    const char* name = nullptr;
    if (api.get_error_name == nullptr || api.get_error_name(r, &name) != CUDA_SUCCESS || name == nullptr)
        name = "CUDA error";
    return std::string(name) + " (" + std::to_string(r) + ")";
}

class CudaBackend final : public GpuBackend {
   public:
    CudaBackend(Library lib, CudaApi api, CUdevice dev, std::string name, int version, std::string mode)
        : lib_(std::move(lib)), api_(api), dev_(dev), name_(std::move(name)), version_(version),
          mode_(std::move(mode)), page_(static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) {}
    ~CudaBackend() override { api_.primary_ctx_release(dev_); }

    Json describe() const override {
        return Json::object()
            .set("backend", "cuda")
            .set("library", lib_.path())
            .set("runtime_version",
                 "CUDA driver " + std::to_string(version_ / 1000) + "." + std::to_string((version_ % 1000) / 10))
            .set("device", name_)
            .set("export_api", "cuMemGetHandleForAddressRange")
            .set("cuda_export", mode_);
    }

    std::string summary() const override {
        return "CUDA driver " + std::to_string(version_ / 1000) + "." + std::to_string((version_ % 1000) / 10) +
               ", " + name_ + ", export of the " + mode_ + " (" + lib_.path() + ")";
    }

    bool alloc(size_t size, uint64_t* ptr, std::string* err) override {
        CUdeviceptr p = 0;
        if (!check(api_.mem_alloc(&p, size), "cuMemAlloc", err)) return false;
        *ptr = p;
        return true;
    }

    void release(uint64_t ptr) override { api_.mem_free(ptr); }

    bool to_device(uint64_t dst, const void* src, size_t n, std::string* err) override {
        return check(api_.memcpy_htod(dst, src, n), "cuMemcpyHtoD", err);
    }

    bool to_host(void* dst, uint64_t src, size_t n, std::string* err) override {
        return check(api_.memcpy_dtoh(dst, src, n), "cuMemcpyDtoH", err);
    }

    // The driver only exports page-aligned ranges and the fd covers exactly the range asked for,
    // so the exporter offset is the pointer's distance from the start of what was exported.
    bool export_dmabuf(uint64_t ptr, size_t size, Export* out, std::string* err) override {
        uint64_t start = 0;
        uint64_t length = 0;
        if (mode_ == "allocation") {
            CUdeviceptr base = 0;
            size_t alloc_size = 0;
            if (!check(api_.mem_get_address_range(&base, &alloc_size, ptr), "cuMemGetAddressRange", err))
                return false;
            start = base;
            length = round_up(alloc_size);
        } else {
            start = ptr & ~(page_ - 1);
            length = round_up(ptr + size - start);
        }
        int fd = -1;
        if (!check(api_.get_handle_for_address_range(&fd, start, length, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
                   "cuMemGetHandleForAddressRange", err))
            return false;
        out->fd = fd;
        out->offset = ptr - start;
        out->fd_size = fd_object_size(fd);
        out->object_base = start;
        out->covers = mode_;
        return true;
    }

    bool close_dmabuf(int fd, std::string* err) override {
        if (close(fd) != 0) {
            *err = "close(dma-buf fd) failed";
            return false;
        }
        return true;
    }

   private:
    uint64_t round_up(uint64_t n) const { return (n + page_ - 1) & ~(page_ - 1); }

    bool check(CUresult r, const char* what, std::string* err) const {
        if (r == CUDA_SUCCESS) return true;
        *err = std::string(what) + " failed: " + describe_result(api_, r);
        return false;
    }

    Library lib_;
    CudaApi api_;
    CUdevice dev_;
    std::string name_;
    int version_;
    std::string mode_;
    uint64_t page_;
};

}  // namespace

Probe open_cuda(int gpu_index, const std::string& cuda_export) {
    Probe probe;
    Library lib;
    std::string error;
    if (!lib.open("MORI_REPRO_LIBCUDA", "libcuda.so.1", &error)) {
        probe.failure = ProbeFailure::LibraryMissing;
        probe.library = lib.path();
        probe.detail = error;
        return probe;
    }
    probe.library = lib.path();
    CudaApi api{};
    const char* missing = nullptr;
    auto need = [&](const char* name, auto* slot) {
        if (!lib.sym(name, slot) && missing == nullptr) missing = name;
    };
    need("cuInit", &api.init);
    need("cuDriverGetVersion", &api.driver_get_version);
    need("cuDeviceGet", &api.device_get);
    need("cuDeviceGetCount", &api.device_get_count);
    need("cuDeviceGetAttribute", &api.device_get_attribute);
    need("cuDevicePrimaryCtxRetain", &api.primary_ctx_retain);
    need("cuDevicePrimaryCtxRelease_v2", &api.primary_ctx_release);
    need("cuCtxSetCurrent", &api.ctx_set_current);
    need("cuMemAlloc_v2", &api.mem_alloc);
    need("cuMemFree_v2", &api.mem_free);
    need("cuMemcpyHtoD_v2", &api.memcpy_htod);
    need("cuMemcpyDtoH_v2", &api.memcpy_dtoh);
    need("cuMemGetAddressRange_v2", &api.mem_get_address_range);
    if (missing != nullptr) {
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = lib.path() + " lacks " + missing;
        return probe;
    }
    // Only used for messages and the report.
    lib.sym("cuGetErrorName", &api.get_error_name);
    lib.sym("cuDeviceGetName", &api.device_get_name);
    CUresult r = api.init(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = api.device_get_count(&count);
    if (r != CUDA_SUCCESS || count <= gpu_index) {
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = r != CUDA_SUCCESS ? "cuInit failed: " + describe_result(api, r)
                                         : "the driver reports " + std::to_string(count) +
                                               " device(s); index " + std::to_string(gpu_index) + " requested";
        return probe;
    }
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    r = api.device_get(&dev, gpu_index);
    if (r == CUDA_SUCCESS) r = api.primary_ctx_retain(&ctx, dev);
    if (r == CUDA_SUCCESS) r = api.ctx_set_current(ctx);
    if (r != CUDA_SUCCESS) {
        probe.failure = ProbeFailure::NoGpu;
        probe.detail = "could not make device " + std::to_string(gpu_index) + " current: " + describe_result(api, r);
        return probe;
    }
    int dmabuf_supported = 0;
    r = api.device_get_attribute(&dmabuf_supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev);
    bool has_export = lib.sym("cuMemGetHandleForAddressRange", &api.get_handle_for_address_range);
    if (r != CUDA_SUCCESS || dmabuf_supported != 1 || !has_export) {
        api.primary_ctx_release(dev);
        probe.failure = ProbeFailure::NoDmabuf;
        probe.detail = !has_export ? lib.path() + " lacks cuMemGetHandleForAddressRange (driver too old)"
                                   : "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is " + std::to_string(dmabuf_supported) +
                                         " on device " + std::to_string(gpu_index);
        return probe;
    }
    char name[128] = "unknown";
    if (api.device_get_name != nullptr) api.device_get_name(name, sizeof name - 1, dev);
    int version = 0;
    api.driver_get_version(&version);
    probe.backend = std::make_unique<CudaBackend>(std::move(lib), api, dev, name, version, cuda_export);
    return probe;
}

}  // namespace mr
