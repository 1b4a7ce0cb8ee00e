/* Test double of the ROCr HSA runtime (libhsa-runtime64.so.1): agents, memory pools,
 * pointer info and the portable dma-buf export, with ROCr's status codes. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_double.h"
#include "gpu_heap.h"
#include "hsa_min.h"

#define EXPORT __attribute__((visibility("default")))

enum { AGENT_CPU = 0x1001, AGENT_GPU = 0x2001, POOL_VRAM = 0x3001, POOL_SYSTEM = 0x3002, LOCKED = 0x3003 };

static atomic_int g_refcount;
static atomic_long g_pointer_queries; /* test hook: how often callers asked what a pointer is */
static struct gpu_heap g_heap = GPU_HEAP_INIT(GPU_DOUBLE_HSA_BASE, "hsa-vram");

static int initialized(void)
{
	return atomic_load(&g_refcount) > 0;
}

EXPORT hsa_status_t hsa_init(void)
{
	atomic_fetch_add(&g_refcount, 1);
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_shut_down(void)
{
	int cur = atomic_load(&g_refcount);
	while (cur > 0 && !atomic_compare_exchange_weak(&g_refcount, &cur, cur - 1))
		;
	return cur > 0 ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_NOT_INITIALIZED;
}

EXPORT hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t, void *), void *data)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (callback == NULL)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	const uint64_t agents[] = { AGENT_CPU, AGENT_GPU };
	for (size_t i = 0; i < 2; i++) {
		hsa_status_t st = callback((hsa_agent_t){ agents[i] }, data);
		if (st != HSA_STATUS_SUCCESS)
			return st; /* HSA_STATUS_INFO_BREAK included: the runtime passes it through */
	}
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (agent.handle != AGENT_CPU && agent.handle != AGENT_GPU)
		return HSA_STATUS_ERROR_INVALID_AGENT;
	if (value == NULL)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	switch (attribute) {
	case HSA_AGENT_INFO_NAME: /* char[64] */
		memset(value, 0, 64);
		strcpy((char *)value, agent.handle == AGENT_GPU ? "gfx950" : "cpu-double");
		return HSA_STATUS_SUCCESS;
	case HSA_AGENT_INFO_DEVICE:
		*(hsa_device_type_t *)value = agent.handle == AGENT_GPU ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU;
		return HSA_STATUS_SUCCESS;
	}
	return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

EXPORT hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
						       hsa_status_t (*callback)(hsa_amd_memory_pool_t, void *),
						       void *data)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (agent.handle != AGENT_CPU && agent.handle != AGENT_GPU)
		return HSA_STATUS_ERROR_INVALID_AGENT;
	if (callback == NULL)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	uint64_t pool = agent.handle == AGENT_GPU ? POOL_VRAM : POOL_SYSTEM;
	return callback((hsa_amd_memory_pool_t){ pool }, data);
}

EXPORT hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool, hsa_amd_memory_pool_info_t attribute,
						 void *value)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (pool.handle != POOL_VRAM && pool.handle != POOL_SYSTEM)
		return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
	if (value == NULL)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	switch (attribute) {
	case HSA_AMD_MEMORY_POOL_INFO_SEGMENT:
		*(hsa_amd_segment_t *)value = HSA_AMD_SEGMENT_GLOBAL;
		return HSA_STATUS_SUCCESS;
	case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
		*(uint32_t *)value = pool.handle == POOL_VRAM ? HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
							      : (HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED |
								 HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT);
		return HSA_STATUS_SUCCESS;
	case HSA_AMD_MEMORY_POOL_INFO_SIZE:
		*(size_t *)value = GPU_DOUBLE_APERTURE_SIZE / 2;
		return HSA_STATUS_SUCCESS;
	case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED:
		*(bool *)value = true;
		return HSA_STATUS_SUCCESS;
	case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE:
	case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT:
		*(size_t *)value = GPU_DOUBLE_PAGE;
		return HSA_STATUS_SUCCESS;
	}
	return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

EXPORT hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size, uint32_t flags, void **ptr)
{
	(void)flags;
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (pool.handle != POOL_VRAM && pool.handle != POOL_SYSTEM)
		return (hsa_status_t)HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
	if (ptr == NULL || size == 0)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	uint64_t base = 0;
	int err = pool.handle == POOL_VRAM ? gpu_heap_alloc_device(&g_heap, size, POOL_VRAM, &base)
					   : gpu_heap_alloc_host(&g_heap, size, POOL_SYSTEM, &base);
	if (err != 0)
		return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
	*ptr = (void *)base;
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_amd_memory_pool_free(void *ptr)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (ptr == NULL)
		return HSA_STATUS_SUCCESS;
	return gpu_heap_free(&g_heap, (uint64_t)ptr) == 0 ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_INVALID_ALLOCATION;
}

EXPORT hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
					 uint32_t *num_agents_accessible, hsa_agent_t **accessible)
{
	atomic_fetch_add(&g_pointer_queries, 1);
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (info == NULL || info->size < offsetof(hsa_amd_pointer_info_t, userData))
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	if ((num_agents_accessible != NULL || accessible != NULL) && alloc == NULL)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	/* fill only what the caller's struct has room for, and report what was filled */
	hsa_amd_pointer_info_t full;
	memset(&full, 0, sizeof(full));
	struct gpu_region r;
	int found = gpu_heap_find(&g_heap, (uint64_t)ptr, &r);
	full.type = !found ? HSA_EXT_POINTER_TYPE_UNKNOWN
		    : r.tag == LOCKED ? HSA_EXT_POINTER_TYPE_LOCKED
				      : HSA_EXT_POINTER_TYPE_HSA;
	if (found) {
		full.agentBaseAddress = (void *)r.base;
		full.hostBaseAddress = (void *)r.base;
		full.sizeInBytes = r.size;
		full.agentOwner.handle = r.tag == POOL_VRAM ? AGENT_GPU : AGENT_CPU;
		full.global_flags = r.tag == POOL_VRAM ? HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
						       : HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
	}
	uint32_t room = info->size < sizeof(full) ? info->size : (uint32_t)sizeof(full);
	full.size = room;
	memcpy(info, &full, room);
	if (num_agents_accessible != NULL || accessible != NULL) {
		uint32_t n = found ? (r.tag == POOL_VRAM ? 1 : 2) : 0;
		hsa_agent_t *list = n ? alloc(n * sizeof(hsa_agent_t)) : NULL;
		if (n && list == NULL)
			return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
		if (n) {
			list[0].handle = AGENT_GPU;
			if (n == 2)
				list[1].handle = AGENT_CPU;
		}
		if (num_agents_accessible != NULL)
			*num_agents_accessible = n;
		if (accessible != NULL)
			*accessible = list;
		else
			free(list);
	}
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_amd_portable_export_dmabuf_v2(const void *ptr, size_t size, int *dmabuf, uint64_t *offset,
						      uint64_t flags)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (dmabuf == NULL || offset == NULL || size == 0 || flags > HSA_AMD_DMABUF_MAPPING_TYPE_PCIE)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	struct gpu_region r;
	if (!gpu_heap_find(&g_heap, (uint64_t)ptr, &r) || (uint64_t)ptr - r.base + size > r.size)
		return HSA_STATUS_ERROR_INVALID_ALLOCATION;
	if (r.tag != POOL_VRAM)
		return HSA_STATUS_ERROR_INVALID_AGENT; /* only GPU-owned memory is exportable */
	/* the dma-buf is the whole allocation; the offset is where ptr sits inside it */
	int fd = gpu_export_fd("hsa", r.base, r.mapped);
	if (fd < 0)
		return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
	*dmabuf = fd;
	*offset = (uint64_t)ptr - r.base;
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *dmabuf, uint64_t *offset)
{
	return hsa_amd_portable_export_dmabuf_v2(ptr, size, dmabuf, offset, HSA_AMD_DMABUF_MAPPING_TYPE_NONE);
}

EXPORT hsa_status_t hsa_amd_portable_close_dmabuf(int dmabuf)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	return close(dmabuf) == 0 ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_RESOURCE_FREE;
}

EXPORT hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size, hsa_agent_t *agents, int num_agent,
					void **agent_ptr)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (host_ptr == NULL || size == 0 || agent_ptr == NULL || num_agent < 0 || (num_agent > 0 && agents == NULL))
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < num_agent; i++)
		if (agents[i].handle != AGENT_CPU && agents[i].handle != AGENT_GPU)
			return HSA_STATUS_ERROR_INVALID_AGENT;
	struct gpu_region r;
	if (gpu_heap_find(&g_heap, (uint64_t)host_ptr, &r))
		return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* runtime memory, or already locked */
	if (gpu_heap_track(&g_heap, (uint64_t)host_ptr, size, LOCKED) != 0)
		return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
	*agent_ptr = host_ptr; /* the GPU sees locked system memory at the same address here */
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_amd_memory_unlock(void *host_ptr)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	struct gpu_region r;
	if (!gpu_heap_find(&g_heap, (uint64_t)host_ptr, &r) || r.tag != LOCKED || r.base != (uint64_t)host_ptr)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	gpu_heap_free(&g_heap, r.base);
	return HSA_STATUS_SUCCESS;
}

/* Either side must be memory the runtime knows (allocated or locked) and the range must stay inside it. */
static int copy_side_ok(const void *p, size_t size)
{
	struct gpu_region r;
	return gpu_heap_find(&g_heap, (uint64_t)p, &r) && (uint64_t)p - r.base + size <= r.mapped;
}

EXPORT hsa_status_t hsa_memory_copy(void *dst, const void *src, size_t size)
{
	if (!initialized())
		return HSA_STATUS_ERROR_NOT_INITIALIZED;
	if (size == 0)
		return HSA_STATUS_SUCCESS;
	if (dst == NULL || src == NULL || !copy_side_ok(dst, size) || !copy_side_ok(src, size))
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	memmove(dst, src, size);
	return HSA_STATUS_SUCCESS;
}

EXPORT hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string)
{
	static const struct {
		int status;
		const char *text;
	} known[] = {
		{ HSA_STATUS_SUCCESS, "success" },
		{ HSA_STATUS_ERROR, "generic error" },
		{ HSA_STATUS_ERROR_INVALID_ARGUMENT, "invalid argument" },
		{ HSA_STATUS_ERROR_INVALID_ALLOCATION, "not a valid allocation" },
		{ HSA_STATUS_ERROR_INVALID_AGENT, "invalid agent" },
		{ HSA_STATUS_ERROR_OUT_OF_RESOURCES, "out of resources" },
		{ HSA_STATUS_ERROR_RESOURCE_FREE, "error while releasing a resource" },
		{ HSA_STATUS_ERROR_NOT_INITIALIZED, "runtime not initialised (hsa_init not called)" },
		{ HSA_STATUS_ERROR_INVALID_MEMORY_POOL, "invalid memory pool" },
	};
	if (status_string == NULL)
		return HSA_STATUS_ERROR_INVALID_ARGUMENT;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		if (known[i].status == (int)status) {
			*status_string = known[i].text;
			return HSA_STATUS_SUCCESS;
		}
	}
	return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

/* Test hook (not in ROCr): hsa_amd_pointer_info calls so far. */
EXPORT long hsa_double_pointer_queries(void)
{
	return atomic_load(&g_pointer_queries);
}

/* Test hook (not in ROCr): open dma-buf fds this runtime exported, counted from /proc/self/fd. */
EXPORT int hsa_double_open_exports(void)
{
	return gpu_count_exports("hsa");
}
