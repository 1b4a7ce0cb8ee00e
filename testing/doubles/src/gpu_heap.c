#define _GNU_SOURCE
#include "gpu_heap.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_double.h"

static size_t round_page(size_t size)
{
	return (size + GPU_DOUBLE_PAGE - 1) & ~(size_t)(GPU_DOUBLE_PAGE - 1);
}

static void link_region(struct gpu_heap *heap, struct gpu_region *r)
{
	r->next = heap->head;
	heap->head = r;
}

int gpu_heap_alloc_device(struct gpu_heap *heap, size_t size, int tag, uint64_t *out)
{
	size_t mapped = round_page(size);
	struct gpu_region *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return ENOMEM;
	int fd = memfd_create(heap->vram_name, MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)mapped) != 0) {
		int err = errno;
		if (fd >= 0)
			close(fd);
		free(r);
		return err;
	}
	pthread_mutex_lock(&heap->lock);
	void *p = MAP_FAILED;
	while (heap->next + mapped <= heap->limit) {
		uint64_t at = heap->next;
		/* one guard page between allocations, as a real VA allocator leaves holes */
		heap->next += mapped + GPU_DOUBLE_PAGE;
		p = mmap((void *)at, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
		if (p != MAP_FAILED && (uint64_t)p == at)
			break;
		if (p != MAP_FAILED)
			munmap(p, mapped); /* kernel ignored the hint: keep looking */
		p = MAP_FAILED;
	}
	if (p == MAP_FAILED) {
		pthread_mutex_unlock(&heap->lock);
		close(fd);
		free(r);
		return ENOMEM;
	}
	r->base = (uint64_t)p;
	r->size = size;
	r->mapped = mapped;
	r->memfd = fd;
	r->owned = 1;
	r->tag = tag;
	link_region(heap, r);
	pthread_mutex_unlock(&heap->lock);
	*out = r->base;
	return 0;
}

int gpu_heap_alloc_host(struct gpu_heap *heap, size_t size, int tag, uint64_t *out)
{
	size_t mapped = round_page(size);
	struct gpu_region *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return ENOMEM;
	void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(r);
		return ENOMEM;
	}
	r->base = (uint64_t)p;
	r->size = size;
	r->mapped = mapped;
	r->memfd = -1;
	r->owned = 1;
	r->tag = tag;
	pthread_mutex_lock(&heap->lock);
	link_region(heap, r);
	pthread_mutex_unlock(&heap->lock);
	*out = r->base;
	return 0;
}

int gpu_heap_track(struct gpu_heap *heap, uint64_t base, size_t size, int tag)
{
	struct gpu_region *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return ENOMEM;
	r->base = base;
	r->size = size;
	r->mapped = size;
	r->memfd = -1;
	r->owned = 0;
	r->tag = tag;
	pthread_mutex_lock(&heap->lock);
	link_region(heap, r);
	pthread_mutex_unlock(&heap->lock);
	return 0;
}

int gpu_heap_free(struct gpu_heap *heap, uint64_t base)
{
	pthread_mutex_lock(&heap->lock);
	struct gpu_region **link = &heap->head;
	while (*link != NULL && (*link)->base != base)
		link = &(*link)->next;
	struct gpu_region *r = *link;
	if (r != NULL)
		*link = r->next;
	pthread_mutex_unlock(&heap->lock);
	if (r == NULL)
		return EINVAL;
	if (r->owned)
		munmap((void *)r->base, r->mapped);
	if (r->memfd >= 0)
		close(r->memfd);
	free(r);
	return 0;
}

int gpu_heap_find(struct gpu_heap *heap, uint64_t addr, struct gpu_region *out)
{
	int found = 0;
	pthread_mutex_lock(&heap->lock);
	for (struct gpu_region *r = heap->head; r != NULL; r = r->next) {
		if (addr >= r->base && addr < r->base + r->mapped) {
			*out = *r;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&heap->lock);
	return found;
}

int gpu_export_fd(const char *kind, uint64_t base, size_t size)
{
	char name[128];
	snprintf(name, sizeof(name), "%s" GPU_DOUBLE_DMABUF_SUFFIX "%d:%" PRIx64, kind, (int)getpid(), base);
	/* no MFD_CLOEXEC: exporters hand back plain fds; the caller owns closing them */
	int fd = memfd_create(name, 0);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) != 0) {
		int err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

int gpu_count_exports(const char *kind)
{
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "/memfd:%s" GPU_DOUBLE_DMABUF_SUFFIX, kind);
	DIR *dir = opendir("/proc/self/fd");
	if (dir == NULL)
		return -1;
	int count = 0;
	struct dirent *ent;
	while ((ent = readdir(dir)) != NULL) {
		char path[300], target[256];
		if (ent->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", ent->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, prefix, strlen(prefix)) == 0)
			count++;
	}
	closedir(dir);
	return count;
}
