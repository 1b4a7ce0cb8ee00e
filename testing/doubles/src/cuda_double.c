/* Test double of the CUDA driver (libcuda.so.1): device memory and
 * cuMemGetHandleForAddressRange with the driver's page-alignment rules. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "cuda_min.h"
#include "gpu_double.h"
#include "gpu_heap.h"

#define EXPORT __attribute__((visibility("default")))

static atomic_int g_initialized;
static atomic_long g_pointer_queries; /* test hook: how often callers asked what a pointer is */
static struct gpu_heap g_heap = GPU_HEAP_INIT(GPU_DOUBLE_CUDA_BASE, "cuda-vram");
static struct CUctx_st {
	atomic_int refs;
} g_primary;
static __thread CUcontext t_current; /* the calling thread's current context */

/* Allocation and copies need a current context, as in the driver. */
static CUresult need_context(void)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	return t_current == &g_primary && atomic_load(&g_primary.refs) > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	atomic_store(&g_initialized, 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 13000;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice device)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (device != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (attrib == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) {
		*value = 1; /* as measured on an H200, driver 580 */
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	atomic_fetch_add(&g_primary.refs, 1);
	*pctx = &g_primary;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	int cur = atomic_load(&g_primary.refs);
	while (cur > 0 && !atomic_compare_exchange_weak(&g_primary.refs, &cur, cur - 1))
		;
	return cur > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx != NULL && ctx != &g_primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	t_current = ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult ctx = need_context();
	if (ctx != CUDA_SUCCESS)
		return ctx;
	if (dptr == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t base = 0;
	if (gpu_heap_alloc_device(&g_heap, bytesize, 0, &base) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = base;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult ctx = need_context();
	if (ctx != CUDA_SUCCESS)
		return ctx;
	return gpu_heap_free(&g_heap, dptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	struct gpu_region r;
	if (!gpu_heap_find(&g_heap, dptr, &r))
		return CUDA_ERROR_INVALID_VALUE;
	if (base != NULL)
		*base = r.base;
	if (size != NULL)
		*size = r.size;
	return CUDA_SUCCESS;
}

/* A copy's device side must lie inside one allocation. */
static int device_range_ok(CUdeviceptr p, size_t n)
{
	struct gpu_region r;
	return gpu_heap_find(&g_heap, p, &r) && p - r.base + n <= r.mapped;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	CUresult ctx = need_context();
	if (ctx != CUDA_SUCCESS)
		return ctx;
	if (n == 0)
		return CUDA_SUCCESS;
	if (src == NULL || !device_range_ok(dst, n))
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)(uintptr_t)dst, src, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	CUresult ctx = need_context();
	if (ctx != CUDA_SUCCESS)
		return ctx;
	if (n == 0)
		return CUDA_SUCCESS;
	if (dst == NULL || !device_range_ok(src, n))
		return CUDA_ERROR_INVALID_VALUE;
	memmove(dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	atomic_fetch_add(&g_pointer_queries, 1);
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct gpu_region r;
	if (!gpu_heap_find(&g_heap, ptr, &r))
		return CUDA_ERROR_INVALID_VALUE; /* memory the driver does not know */
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = r.base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = r.size;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE; /* attributes the double does not model */
	}
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
					      CUmemRangeHandleType handleType, unsigned long long flags)
{
	if (!atomic_load(&g_initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (handle == NULL || handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD ||
	    flags > CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)
		return CUDA_ERROR_INVALID_VALUE;
	long page = sysconf(_SC_PAGESIZE);
	if (size == 0 || dptr % (unsigned long long)page != 0 || size % (size_t)page != 0)
		return CUDA_ERROR_INVALID_VALUE; /* the range must be host-page aligned at both ends */
	struct gpu_region r;
	if (!gpu_heap_find(&g_heap, dptr, &r) || dptr - r.base + size > r.mapped)
		return CUDA_ERROR_INVALID_VALUE;
	/* the dma-buf is exactly the range asked for, not the whole allocation */
	int fd = gpu_export_fd("cuda", dptr, size);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

/* Test hook (not in the driver): cuPointerGetAttribute calls so far. */
EXPORT long cuda_double_pointer_queries(void)
{
	return atomic_load(&g_pointer_queries);
}

/* Test hook (not in the driver): open dma-buf fds this driver exported. */
EXPORT int cuda_double_open_exports(void)
{
	return gpu_count_exports("cuda");
}
