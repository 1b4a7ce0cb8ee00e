/* Conventions shared by the GPU runtime doubles (HSA, CUDA) and the verbs double.
 *
 * "Device memory" handed out by a GPU double is a memfd mapped inside a fixed virtual
 * aperture, so the verbs double can tell it from host memory by address alone (as the
 * ionic driver tells a VRAM mapping from pageable memory) without linking to the GPU doubles.
 *
 * An exported dma-buf is a fresh memfd whose size is the exported size and whose name
 * records where the exported object's first byte lives in this process:
 *     <kind>-dmabuf:<pid>:<hex base>
 * The verbs double maps [offset, offset + length) of that object; a closed export fd is
 * gone from /proc/self/fd, so leaks can be counted there.
 */
#ifndef GPU_DOUBLE_H
#define GPU_DOUBLE_H

#include <stdint.h>

#define GPU_DOUBLE_APERTURE_BASE 0x200000000000ULL /* 32 TiB: far from heap, libraries and stack */
#define GPU_DOUBLE_APERTURE_SIZE 0x100000000000ULL /* 16 TiB */
#define GPU_DOUBLE_HSA_BASE GPU_DOUBLE_APERTURE_BASE
#define GPU_DOUBLE_CUDA_BASE (GPU_DOUBLE_APERTURE_BASE + GPU_DOUBLE_APERTURE_SIZE / 2)
#define GPU_DOUBLE_PAGE 4096ULL
#define GPU_DOUBLE_DMABUF_SUFFIX "-dmabuf:"

static inline int gpu_double_in_aperture(uint64_t addr, uint64_t len)
{
	uint64_t end = addr + len;
	if (end < addr)
		return 1;
	return addr < GPU_DOUBLE_APERTURE_BASE + GPU_DOUBLE_APERTURE_SIZE && end > GPU_DOUBLE_APERTURE_BASE;
}

/* Test hooks the doubles export (no counterpart in the real libraries). Declared weak so a
 * program can test for them: they are NULL when the real library is loaded instead. */
#ifdef __cplusplus
extern "C" {
#endif
int hsa_double_open_exports(void) __attribute__((weak));  /* open dma-buf fds from the HSA double */
int cuda_double_open_exports(void) __attribute__((weak)); /* open dma-buf fds from the CUDA double */
int ibv_double_live_mrs(void) __attribute__((weak));      /* registered, not yet deregistered MRs */
long hsa_double_pointer_queries(void) __attribute__((weak));  /* hsa_amd_pointer_info calls */
long cuda_double_pointer_queries(void) __attribute__((weak)); /* cuPointerGetAttribute calls */
#ifdef __cplusplus
}
#endif

#endif
