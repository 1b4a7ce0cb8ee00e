/* An HSA runtime that calls back into verbs from its constructor and from the dma-buf export,
 * forwarding everything else to the HSA double. Loaded by the shim through DMABUF_SHIM_HSA_LIB.
 * REENTRY_FAIL_EXPORT=1 makes the export fail as ROCr does for memory it does not know. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <infiniband/verbs.h>

#include "hsa_min.h"

#define EXPORT __attribute__((visibility("default")))

static int calls, last_errno = -1;
static char byte;

static void call_verbs(void)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(NULL, &byte, 1, IBV_ACCESS_LOCAL_WRITE);
	calls++;
	last_errno = mr != NULL ? 0 : errno;
}

static void *runtime(const char *name)
{
	void *lib = dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *fn = lib != NULL ? dlsym(lib, name) : NULL;
	if (fn == NULL) {
		fprintf(stderr, "reentrant_hsa: %s not found in the HSA double\n", name);
		abort();
	}
	return fn;
}

__attribute__((constructor)) static void on_load(void)
{
	call_verbs();
}

__attribute__((destructor)) static void on_unload(void)
{
	fprintf(stderr, "reentrant_hsa: calls=%d last_errno=%d\n", calls, last_errno);
}

EXPORT hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
					 uint32_t *n, hsa_agent_t **accessible)
{
	hsa_status_t (*fn)(const void *, hsa_amd_pointer_info_t *, void *(*)(size_t), uint32_t *, hsa_agent_t **) =
		runtime("hsa_amd_pointer_info");
	return fn(ptr, info, alloc, n, accessible);
}

EXPORT hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value)
{
	hsa_status_t (*fn)(hsa_agent_t, hsa_agent_info_t, void *) = runtime("hsa_agent_get_info");
	return fn(agent, attribute, value);
}

EXPORT hsa_status_t hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *dmabuf, uint64_t *offset)
{
	call_verbs();
	const char *fail = getenv("REENTRY_FAIL_EXPORT");
	if (fail != NULL && fail[0] == '1')
		return HSA_STATUS_ERROR_INVALID_ALLOCATION;
	hsa_status_t (*fn)(const void *, size_t, int *, uint64_t *) = runtime("hsa_amd_portable_export_dmabuf");
	return fn(ptr, size, dmabuf, offset);
}

EXPORT hsa_status_t hsa_amd_portable_close_dmabuf(int fd)
{
	hsa_status_t (*fn)(int) = runtime("hsa_amd_portable_close_dmabuf");
	return fn(fd);
}
