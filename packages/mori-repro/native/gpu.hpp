// The GPU side of the reproducer: allocate "VRAM", copy to and from it, export it as a dma-buf.
// Two implementations (HSA for ROCm, the CUDA driver API), both loaded at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "json.hpp"

namespace mr {

// What one export call returned. `offset` is where the exported pointer sits inside the fd's object.
struct Export {
    int fd = -1;
    uint64_t offset = 0;
    uint64_t fd_size = 0;       // size of the exported object, read back from the fd itself
    uint64_t object_base = 0;   // device address of the object's first byte
    std::string covers;         // "allocation" or "range"
};

class GpuBackend {
   public:
    virtual ~GpuBackend() = default;
    virtual Json describe() const = 0;
    virtual std::string summary() const = 0;  // one line for the text output
    virtual bool alloc(size_t size, uint64_t* ptr, std::string* err) = 0;
    virtual void release(uint64_t ptr) = 0;
    virtual bool to_device(uint64_t dst, const void* src, size_t n, std::string* err) = 0;
    virtual bool to_host(void* dst, uint64_t src, size_t n, std::string* err) = 0;
    virtual bool export_dmabuf(uint64_t ptr, size_t size, Export* out, std::string* err) = 0;
    virtual bool close_dmabuf(int fd, std::string* err) = 0;
};

// Why a backend could not be opened; the caller turns these into the environment report.
enum class ProbeFailure { None, LibraryMissing, NoGpu, NoDmabuf };

struct Probe {
    std::unique_ptr<GpuBackend> backend;
    ProbeFailure failure = ProbeFailure::None;
    std::string library;  // the path or soname tried
    std::string detail;
};

Probe open_hsa(int gpu_index);
// cuda_export: "allocation" exports the whole containing allocation (the pool semantics HSA has);
// "range" exports only the page-aligned range around the pointer (what the driver allows for interior pointers).
Probe open_cuda(int gpu_index, const std::string& cuda_export);

// Size of the object behind a dma-buf (or memfd) fd, or 0 when the fd cannot say.
uint64_t fd_object_size(int fd);

}  // namespace mr
