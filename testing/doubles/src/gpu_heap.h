/* Device-memory bookkeeping shared by the HSA and CUDA doubles (each links its own copy). */
#ifndef GPU_HEAP_H
#define GPU_HEAP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_region {
	uint64_t base;
	size_t size;	/* bytes asked for */
	size_t mapped;	/* bytes mapped: size rounded up to the page */
	int memfd;	/* -1 for host (system pool) memory */
	int owned;	/* 0: registered host memory (locked), not ours to unmap */
	int tag;	/* caller-defined: which pool */
	struct gpu_region *next;
};

struct gpu_heap {
	pthread_mutex_t lock;
	uint64_t next;	/* bump pointer inside the heap's half of the aperture */
	uint64_t limit;
	const char *vram_name;
	struct gpu_region *head;
};

#define GPU_HEAP_INIT(base, name) { PTHREAD_MUTEX_INITIALIZER, (base), (base) + GPU_DOUBLE_APERTURE_SIZE / 2, (name), NULL }

/* Device memory: a memfd mapped inside the aperture. Returns 0 or an errno value. */
int gpu_heap_alloc_device(struct gpu_heap *heap, size_t size, int tag, uint64_t *out);
/* Host memory the runtime knows about (pinned/system pool): anonymous, outside the aperture. */
int gpu_heap_alloc_host(struct gpu_heap *heap, size_t size, int tag, uint64_t *out);
/* Records existing host memory [base, base + size) under tag (e.g. locked memory). Returns 0 or an errno. */
int gpu_heap_track(struct gpu_heap *heap, uint64_t base, size_t size, int tag);
/* Frees the allocation starting exactly at base (or forgets a tracked range). Returns 0 or EINVAL. */
int gpu_heap_free(struct gpu_heap *heap, uint64_t base);
/* Copies the region containing addr into *out. Returns 1 when found. */
int gpu_heap_find(struct gpu_heap *heap, uint64_t addr, struct gpu_region *out);
/* A new dma-buf stand-in: memfd "<kind>-dmabuf:<pid>:<hex base>" of the given size. -1 on error. */
int gpu_export_fd(const char *kind, uint64_t base, size_t size);
/* Number of this process's open fds that are dma-bufs exported by <kind>. */
int gpu_count_exports(const char *kind);

#endif
