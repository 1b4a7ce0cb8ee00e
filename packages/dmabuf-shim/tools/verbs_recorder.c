/* Stand-in libibverbs for cuda_check on a machine with a GPU but no RDMA NIC: it accepts the
 * shim's ibv_reg_dmabuf_mr after checking the fd, offset and iova as the kernel would, and
 * reports what it was handed. With RECORDER_REFUSE_DEVICE=1 a plain registration of device
 * memory fails with EINVAL, as on ionic. Preloaded after the shim (LD_PRELOAD=shim:recorder). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static char mr[64]; /* large enough for struct ibv_mr, which the shim writes addr into */
static int reported;

static void *plain(void *addr)
{
	static int refuse = -1;
	if (refuse < 0) {
		const char *env = getenv("RECORDER_REFUSE_DEVICE");
		refuse = env != NULL && env[0] == '1';
	}
	if (refuse) {
		int (*attr)(void *, int, unsigned long long) =
			(int (*)(void *, int, unsigned long long))dlsym(RTLD_DEFAULT, "cuPointerGetAttribute");
		unsigned int type = 0;
		if (attr != NULL && attr(&type, 2, (unsigned long long)(uintptr_t)addr) == 0 && type == 2) {
			errno = EINVAL;
			return NULL;
		}
	}
	return mr;
}

EXPORT void *ibv_reg_mr(void *pd, void *addr, size_t length, int access)
{
	(void)pd, (void)length, (void)access;
	return plain(addr);
}

EXPORT void *ibv_reg_mr_iova2(void *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	(void)pd, (void)length, (void)iova, (void)access;
	return plain(addr);
}

EXPORT void *ibv_reg_dmabuf_mr(void *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access)
{
	(void)pd, (void)access;
	off_t size = lseek(fd, 0, SEEK_END);
	if (!reported++)
		fprintf(stderr, "recorder: dmabuf fd_size=%lld offset=%llu length=%zu iova_page_offset=%llu\n",
			(long long)size, (unsigned long long)offset, length, (unsigned long long)(iova & 4095));
	if (size < 0) {
		errno = EBADF;
		return NULL;
	}
	if (offset + length > (uint64_t)size || ((offset ^ iova) & 4095)) {
		errno = EINVAL;
		return NULL;
	}
	return mr;
}
