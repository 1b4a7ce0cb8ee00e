/* The subset of ROCm's hsa.h / hsa_ext_amd.h that the doubles and their users need.
 * Types, enum values and prototypes are those of the ROCr runtime (ROCm >= 5.6); only
 * the declarations used here are repeated, so nothing needs ROCm headers to build. */
#ifndef HSA_MIN_H
#define HSA_MIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	HSA_STATUS_SUCCESS = 0x0,
	HSA_STATUS_INFO_BREAK = 0x1,
	HSA_STATUS_ERROR = 0x1000,
	HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001,
	HSA_STATUS_ERROR_INVALID_QUEUE_CREATION = 0x1002,
	HSA_STATUS_ERROR_INVALID_ALLOCATION = 0x1003,
	HSA_STATUS_ERROR_INVALID_AGENT = 0x1004,
	HSA_STATUS_ERROR_INVALID_REGION = 0x1005,
	HSA_STATUS_ERROR_INVALID_SIGNAL = 0x1006,
	HSA_STATUS_ERROR_INVALID_QUEUE = 0x1007,
	HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008,
	HSA_STATUS_ERROR_INVALID_PACKET_FORMAT = 0x1009,
	HSA_STATUS_ERROR_RESOURCE_FREE = 0x100A,
	HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B,
	HSA_STATUS_ERROR_REFCOUNT_OVERFLOW = 0x100C
} hsa_status_t;

enum { HSA_STATUS_ERROR_INVALID_MEMORY_POOL = 40 }; /* hsa_ext_amd.h addition */

typedef struct hsa_agent_s {
	uint64_t handle;
} hsa_agent_t;

typedef enum { HSA_DEVICE_TYPE_CPU = 0, HSA_DEVICE_TYPE_GPU = 1, HSA_DEVICE_TYPE_DSP = 2 } hsa_device_type_t;

typedef enum { HSA_AGENT_INFO_NAME = 0, HSA_AGENT_INFO_DEVICE = 17 } hsa_agent_info_t;

typedef struct hsa_amd_memory_pool_s {
	uint64_t handle;
} hsa_amd_memory_pool_t;

typedef enum {
	HSA_AMD_SEGMENT_GLOBAL = 0,
	HSA_AMD_SEGMENT_READONLY = 1,
	HSA_AMD_SEGMENT_PRIVATE = 2,
	HSA_AMD_SEGMENT_GROUP = 3
} hsa_amd_segment_t;

typedef enum {
	HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT = 1,
	HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED = 2,
	HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4
} hsa_amd_memory_pool_global_flag_t;

typedef enum {
	HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0,
	HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1,
	HSA_AMD_MEMORY_POOL_INFO_SIZE = 2,
	HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5,
	HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE = 6,
	HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT = 7
} hsa_amd_memory_pool_info_t;

typedef enum {
	HSA_EXT_POINTER_TYPE_UNKNOWN = 0,
	HSA_EXT_POINTER_TYPE_HSA = 1,
	HSA_EXT_POINTER_TYPE_LOCKED = 2,
	HSA_EXT_POINTER_TYPE_GRAPHICS = 3,
	HSA_EXT_POINTER_TYPE_IPC = 4
} hsa_amd_pointer_type_t;

typedef struct hsa_amd_pointer_info_s {
	uint32_t size; /* caller sets sizeof(); the runtime fills fields that fit */
	hsa_amd_pointer_type_t type;
	void *agentBaseAddress;
	void *hostBaseAddress;
	size_t sizeInBytes;
	void *userData;
	hsa_agent_t agentOwner;
	uint32_t global_flags;
	bool registered;
} hsa_amd_pointer_info_t;

typedef enum { HSA_AMD_DMABUF_MAPPING_TYPE_NONE = 0, HSA_AMD_DMABUF_MAPPING_TYPE_PCIE = 1 } hsa_amd_dma_buf_mapping_type_t;

hsa_status_t hsa_init(void);
hsa_status_t hsa_shut_down(void);
hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void *data), void *data);
hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value);
hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
						hsa_status_t (*callback)(hsa_amd_memory_pool_t pool, void *data),
						void *data);
hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool, hsa_amd_memory_pool_info_t attribute,
					  void *value);
hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size, uint32_t flags, void **ptr);
hsa_status_t hsa_amd_memory_pool_free(void *ptr);
hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
				  uint32_t *num_agents_accessible, hsa_agent_t **accessible);
hsa_status_t hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *dmabuf, uint64_t *offset);
hsa_status_t hsa_amd_portable_export_dmabuf_v2(const void *ptr, size_t size, int *dmabuf, uint64_t *offset,
					       uint64_t flags);
hsa_status_t hsa_amd_portable_close_dmabuf(int dmabuf);
hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size, hsa_agent_t *agents, int num_agent, void **agent_ptr);
hsa_status_t hsa_amd_memory_unlock(void *host_ptr);
hsa_status_t hsa_memory_copy(void *dst, const void *src, size_t size);
hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string);

#ifdef __cplusplus
}
#endif

#endif
