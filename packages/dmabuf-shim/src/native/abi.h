// The few foreign declarations the shim needs, written out so the build needs no rdma-core,
// ROCm or CUDA headers. Layouts, values and symbol names are those of:
//   rdma-core <infiniband/verbs.h> (struct ibv_mr prefix, access flags),
//   ROCr <hsa/hsa.h>, <hsa/hsa_ext_amd.h> (status codes, pointer info, dma-buf export),
//   CUDA <cuda.h> (CUresult, pointer attributes, range handle types).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// ---- rdma-core ----
struct ibv_pd;
struct ibv_context;
// Every rdma-core release starts struct ibv_mr with these fields; the shim only touches `addr`.
struct ibv_mr {
    ibv_context* context;
    ibv_pd* pd;
    void* addr;
    size_t length;
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
};
using reg_mr_fn = ibv_mr* (*)(ibv_pd*, void*, size_t, int);
using reg_mr_iova_fn = ibv_mr* (*)(ibv_pd*, void*, size_t, uint64_t, int);
using reg_mr_iova2_fn = ibv_mr* (*)(ibv_pd*, void*, size_t, uint64_t, unsigned int);
using reg_dmabuf_mr_fn = ibv_mr* (*)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);

// ---- ROCr ----
using hsa_status_t = int;
constexpr hsa_status_t HSA_STATUS_SUCCESS = 0x0;
struct hsa_agent_t {
    uint64_t handle;
};
constexpr int HSA_EXT_POINTER_TYPE_HSA = 1;
constexpr int HSA_AGENT_INFO_DEVICE = 17;
constexpr int HSA_DEVICE_TYPE_GPU = 1;
struct hsa_amd_pointer_info_t {
    uint32_t size;
    int type;  // hsa_amd_pointer_type_t
    void* agentBaseAddress;
    void* hostBaseAddress;
    size_t sizeInBytes;
    void* userData;
    hsa_agent_t agentOwner;
    uint32_t global_flags;
    bool registered;
};
using hsa_pointer_info_fn = hsa_status_t (*)(const void*, hsa_amd_pointer_info_t*, void* (*)(size_t), uint32_t*,
                                             hsa_agent_t**);
using hsa_agent_get_info_fn = hsa_status_t (*)(hsa_agent_t, int, void*);
using hsa_export_fn = hsa_status_t (*)(const void*, size_t, int*, uint64_t*);
using hsa_export_v2_fn = hsa_status_t (*)(const void*, size_t, int*, uint64_t*, uint64_t);
using hsa_close_fn = hsa_status_t (*)(int);

// ---- CUDA driver ----
using CUresult = int;
using CUdeviceptr = unsigned long long;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr unsigned int CU_MEMORYTYPE_DEVICE = 2;
constexpr int CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1;
using cu_pointer_get_attribute_fn = CUresult (*)(void*, int, CUdeviceptr);
using cu_get_handle_fn = CUresult (*)(void*, CUdeviceptr, size_t, int, unsigned long long);

}  // extern "C"
