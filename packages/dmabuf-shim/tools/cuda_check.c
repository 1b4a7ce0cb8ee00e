/* Checks the CUDA backend's assumptions against a real NVIDIA driver (no RDMA NIC needed):
 *   facts     the driver's pointer classification and dma-buf export rules the shim relies on;
 *   shim N    N registrations of interior device pointers through the preloaded shim, fd count kept;
 *   bench N   ns per host-memory registration through the shim vs direct, with CUDA initialised.
 * Build: cc -O2 -o cuda_check cuda_check.c -ldl   (needs libcuda.so.1 at run time only) */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
static CUresult (*cuCtxSetCurrent)(void *);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
static CUresult (*cuMemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
static CUresult (*cuDeviceGetAttribute)(int *, int, int);

#define MiB (1024ull * 1024ull)

static void *need(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (p == NULL) {
		fprintf(stderr, "missing %s\n", name);
		exit(2);
	}
	return p;
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	while (d != NULL && readdir(d) != NULL)
		n++;
	if (d != NULL)
		closedir(d);
	return n;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (cuda == NULL) {
		fprintf(stderr, "libcuda.so.1: %s\n", dlerror());
		return 2;
	}
	*(void **)&cuInit = need(cuda, "cuInit");
	*(void **)&cuDeviceGet = need(cuda, "cuDeviceGet");
	*(void **)&cuDevicePrimaryCtxRetain = need(cuda, "cuDevicePrimaryCtxRetain");
	*(void **)&cuCtxSetCurrent = need(cuda, "cuCtxSetCurrent");
	*(void **)&cuMemAlloc = need(cuda, "cuMemAlloc_v2");
	*(void **)&cuPointerGetAttribute = need(cuda, "cuPointerGetAttribute");
	*(void **)&cuMemGetHandleForAddressRange = need(cuda, "cuMemGetHandleForAddressRange");
	*(void **)&cuDeviceGetAttribute = need(cuda, "cuDeviceGetAttribute");
	int dev = 0, supported = -1;
	void *ctx = NULL;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "CUDA initialisation failed\n");
		return 2;
	}
	cuDeviceGetAttribute(&supported, 124, dev);
	CUdeviceptr base = 0;
	if (cuMemAlloc(&base, 64 * MiB)) {
		fprintf(stderr, "cuMemAlloc failed\n");
		return 2;
	}
	const char *mode = argc > 1 ? argv[1] : "facts";
	long n = argc > 2 ? atol(argv[2]) : 1000;
	if (strcmp(mode, "facts") == 0) {
		unsigned int type = 0;
		static char host[4096];
		CUresult dev_rc = cuPointerGetAttribute(&type, 2, base + 32 * MiB + 100);
		unsigned int host_type = 0;
		CUresult host_rc = cuPointerGetAttribute(&host_type, 2, (CUdeviceptr)(uintptr_t)host);
		int fd = -1;
		CUresult rc = cuMemGetHandleForAddressRange(&fd, base + 32 * MiB, MiB, 1, 0);
		long long size = rc == 0 ? (long long)lseek(fd, 0, SEEK_END) : -1;
		if (fd >= 0)
			close(fd);
		int fd2 = -1;
		CUresult unaligned = cuMemGetHandleForAddressRange(&fd2, base + 32 * MiB + 100, MiB, 1, 0);
		CUresult odd_size = cuMemGetHandleForAddressRange(&fd2, base + 32 * MiB, MiB + 100, 1, 0);
		printf("dma_buf_supported=%d device_memtype_rc=%d device_memtype=%u host_memtype_rc=%d\n", supported,
		       dev_rc, type, host_rc);
		printf("export_rc=%d export_size=%lld unaligned_ptr_rc=%d unaligned_size_rc=%d\n", rc, size, unaligned,
		       odd_size);
		return 0;
	}
	void *(*reg)(void *, void *, size_t, int) = (void *(*)(void *, void *, size_t, int))dlsym(RTLD_DEFAULT, "ibv_reg_mr");
	int (*counters)(uint64_t *, int) = (int (*)(uint64_t *, int))dlsym(RTLD_DEFAULT, "dmabuf_shim_counters");
	if (reg == NULL || counters == NULL) {
		fprintf(stderr, "run with LD_PRELOAD=libdmabuf_shim.so:libverbs_recorder.so\n");
		return 2;
	}
	if (strcmp(mode, "shim") == 0) {
		int before = open_fds(), ok = 0;
		for (long i = 0; i < n; i++) {
			void *p = (void *)(uintptr_t)(base + 32 * MiB + (uint64_t)(i % 4096));
			ok += reg(NULL, p, MiB, 0xf) != NULL;
		}
		uint64_t c[5] = { 0 };
		counters(c, 5);
		printf("ok=%d fds_before=%d fds_after=%d registrations=%llu dmabuf=%llu fallback=%llu failures=%llu\n", ok,
		       before, open_fds(), (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[3],
		       (unsigned long long)c[4]);
		return 0;
	}
	void *rec = dlopen("libverbs_recorder.so", RTLD_NOW | RTLD_NOLOAD);
	void *(*direct)(void *, void *, size_t, int) = rec ? (void *(*)(void *, void *, size_t, int))dlsym(rec, "ibv_reg_mr") : NULL;
	if (direct == NULL) {
		fprintf(stderr, "recorder not preloaded\n");
		return 2;
	}
	static char host[4096];
	double best_direct = 1e30, best_shim = 1e30;
	reg(NULL, host, sizeof(host), 7);
	for (int r = 0; r < 5; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			__asm__ volatile("" : : "r"(direct(NULL, host, sizeof(host), 7)) : "memory");
		double t1 = now_ns();
		for (long i = 0; i < n; i++)
			__asm__ volatile("" : : "r"(reg(NULL, host, sizeof(host), 7)) : "memory");
		double t2 = now_ns();
		if ((t1 - t0) / n < best_direct)
			best_direct = (t1 - t0) / n;
		if ((t2 - t1) / n < best_shim)
			best_shim = (t2 - t1) / n;
	}
	printf("host_direct_ns=%.1f host_shim_ns=%.1f added_ns=%.1f\n", best_direct, best_shim, best_shim - best_direct);
	return 0;
}
