/* A verbs program that registers memory the way UCX does (plain ibv_reg_mr), run under
 * LD_PRELOAD=libdmabuf_shim.so by the tests. Prints key=value facts. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "cuda_min.h"
#include "gpu_double.h"
#include "hsa_min.h"
#include "loopback.h"

#define MiB (1024ull * 1024ull)
#define ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

int g_var_access = ACCESS_ALL; /* not a constant: the header routes through ibv_reg_mr_iova2 */

static hsa_status_t find_gpu(hsa_agent_t agent, void *data)
{
	hsa_device_type_t type;
	hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
	if (type == HSA_DEVICE_TYPE_GPU) {
		*(hsa_agent_t *)data = agent;
		return HSA_STATUS_INFO_BREAK;
	}
	return HSA_STATUS_SUCCESS;
}

static hsa_status_t first_pool(hsa_amd_memory_pool_t pool, void *data)
{
	*(hsa_amd_memory_pool_t *)data = pool;
	return HSA_STATUS_INFO_BREAK;
}

static uint8_t *gpu_alloc(const char *backend, size_t size)
{
	if (strcmp(backend, "hsa") == 0) {
		hsa_agent_t gpu = { 0 };
		hsa_amd_memory_pool_t pool = { 0 };
		void *p = NULL;
		hsa_init();
		hsa_iterate_agents(find_gpu, &gpu);
		hsa_amd_agent_iterate_memory_pools(gpu, first_pool, &pool);
		if (hsa_amd_memory_pool_allocate(pool, size, 0, &p) != HSA_STATUS_SUCCESS)
			DIE("hsa allocate");
		return p;
	}
	CUdeviceptr d = 0;
	CUcontext ctx = NULL;
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		DIE("CUDA context");
	if (cuMemAlloc(&d, size) != CUDA_SUCCESS)
		DIE("cuMemAlloc");
	return (uint8_t *)(uintptr_t)d;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, const char *form)
{
	if (strcmp(form, "const") == 0)
		return ibv_reg_mr(pd, addr, len, ACCESS_ALL); /* calls ibv_reg_mr@IBVERBS_1.1 */
	if (strcmp(form, "var") == 0)
		return ibv_reg_mr(pd, addr, len, g_var_access); /* calls ibv_reg_mr_iova2@IBVERBS_1.8 */
	return ibv_reg_mr_iova(pd, addr, len, (uint64_t)(uintptr_t)addr, ACCESS_ALL); /* @IBVERBS_1.7 */
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

static void print_counters(void)
{
	int (*read)(uint64_t *, int) = (int (*)(uint64_t *, int))dlsym(RTLD_DEFAULT, "dmabuf_shim_counters");
	uint64_t c[5] = { 0 };
	if (read != NULL)
		read(c, 5);
	printf("shim_loaded=%d registrations=%llu dmabuf=%llu passthrough=%llu fallback=%llu failures=%llu\n",
	       read != NULL, (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2],
	       (unsigned long long)c[3], (unsigned long long)c[4]);
}

static int exports_open(const char *backend)
{
	return strcmp(backend, "hsa") == 0 ? hsa_double_open_exports() : cuda_double_open_exports();
}

/* mori#509's check: 1 MiB at 32 MiB (plus `delta`) of a 64 MiB allocation, sentinel at the base. */
static void gpu_write(const char *backend, const char *form, size_t delta)
{
	struct loopback lb;
	lb_open(&lb);
	uint8_t *pool = gpu_alloc(backend, 64 * MiB);
	uint8_t *sub = pool + 32 * MiB + delta;
	memset(pool, 0xAB, 4096);
	memset(sub, 0, MiB);
	errno = 0;
	struct ibv_mr *mr = reg(lb.pd, sub, MiB, form);
	printf("reg=%d errno=%d\n", mr != NULL, mr ? 0 : errno);
	if (mr == NULL) {
		print_counters();
		return;
	}
	printf("mr_addr_is_sub=%d exports_open=%d\n", mr->addr == (void *)sub, exports_open(backend));
	static uint8_t src[1 << 20];
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 1);
	/* the local source needs no remote access (and no atomics a NIC might refuse) */
	struct ibv_mr *smr = ibv_reg_mr(lb.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	if (smr == NULL)
		DIE("host source registration failed: errno=%d", errno);
	int st = lb_rdma(&lb, IBV_WR_RDMA_WRITE, smr, src, MiB, (uint64_t)(uintptr_t)sub, mr->rkey);
	printf("write_status=%d landed=%d sentinel_intact=%d\n", st, memcmp(sub, src, MiB) == 0,
	       pool[0] == 0xAB && pool[4095] == 0xAB);
	memset(src, 0, 4096);
	st = lb_rdma(&lb, IBV_WR_RDMA_READ, smr, src, 4096, (uint64_t)(uintptr_t)sub + 4096, mr->rkey);
	printf("read_status=%d read_ok=%d\n", st, memcmp(src, sub + 4096, 4096) == 0);
	int dereg = ibv_dereg_mr(mr);
	printf("dereg=%d live_mrs_after=%d\n", dereg, ibv_double_live_mrs() - 1); /* smr stays */
	print_counters();
}

static void leak(const char *backend, int n)
{
	struct loopback lb;
	lb_open(&lb);
	uint8_t *pool = gpu_alloc(backend, 64 * MiB);
	int fds_before = open_fds();
	int ok = 0;
	for (int i = 0; i < n; i++) {
		uint8_t *p = pool + (size_t)(i % 63) * MiB + (size_t)(i % 4096);
		struct ibv_mr *mr = reg(lb.pd, p, 4096, i % 2 ? "var" : "const");
		if (mr != NULL && mr->addr == p) {
			ok++;
			ibv_dereg_mr(mr);
		}
	}
	printf("ok=%d fds_before=%d fds_after=%d exports_open=%d live_mrs=%d\n", ok, fds_before, open_fds(),
	       exports_open(backend), ibv_double_live_mrs());
	print_counters();
}

struct worker {
	const char *backend;
	uint8_t *base;
	int id, n, ok, verified;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct loopback lb;
	lb_open(&lb);
	static __thread uint8_t src[4096];
	struct ibv_mr *smr = ibv_reg_mr(lb.pd, src, sizeof(src), ACCESS_ALL);
	for (int i = 0; i < w->n; i++) {
		/* each thread owns one MiB; offsets wander inside it so every export returns a new offset */
		uint8_t *p = w->base + (size_t)w->id * MiB + (size_t)(i % 250) * 4096 + (size_t)(i % 97);
		struct ibv_mr *mr = reg(lb.pd, p, 1024, i % 2 ? "var" : "const");
		if (mr == NULL || mr->addr != p)
			continue;
		w->ok++;
		if (i % 50 == 0) {
			memset(src, w->id + 1 + i % 7, 1024);
			if (lb_rdma(&lb, IBV_WR_RDMA_WRITE, smr, src, 1024, (uint64_t)(uintptr_t)p, mr->rkey) ==
				    IBV_WC_SUCCESS &&
			    memcmp(p, src, 1024) == 0)
				w->verified++;
			else
				w->verified = -1000000;
		}
		ibv_dereg_mr(mr);
	}
	return NULL;
}

static void threads(const char *backend, int nthreads, int n)
{
	uint8_t *base = gpu_alloc(backend, (size_t)nthreads * MiB + MiB);
	pthread_t tid[64];
	struct worker w[64];
	for (int t = 0; t < nthreads; t++) {
		w[t] = (struct worker){ .backend = backend, .base = base, .id = t, .n = n };
		pthread_create(&tid[t], NULL, work, &w[t]);
	}
	int ok = 0, verified = 0;
	for (int t = 0; t < nthreads; t++) {
		pthread_join(tid[t], NULL);
		ok += w[t].ok;
		verified += w[t].verified;
	}
	printf("ok=%d verified=%d exports_open=%d live_mrs=%d\n", ok, verified, exports_open(backend),
	       ibv_double_live_mrs() - nthreads);
	print_counters();
}

static void host(int n)
{
	struct loopback lb;
	lb_open(&lb);
	static uint8_t buf[1 << 16], src[4096];
	int ok = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_mr *mr = reg(lb.pd, buf, sizeof(buf), i % 2 ? "var" : "const");
		if (mr != NULL && mr->addr == buf) {
			ok++;
			ibv_dereg_mr(mr);
		}
	}
	struct ibv_mr *dst = ibv_reg_mr(lb.pd, buf, sizeof(buf), ACCESS_ALL);
	struct ibv_mr *smr = ibv_reg_mr(lb.pd, src, sizeof(src), ACCESS_ALL);
	memset(src, 0x3C, sizeof(src));
	int st = lb_rdma(&lb, IBV_WR_RDMA_WRITE, smr, src, 4096, (uint64_t)(uintptr_t)buf + 4096, dst->rkey);
	printf("ok=%d write_status=%d landed=%d\n", ok, st, buf[4096] == 0x3C && buf[8191] == 0x3C);
	errno = 0;
	struct ibv_mr *bad = ibv_reg_mr(lb.pd, (void *)16, 4096, ACCESS_ALL);
	printf("unmapped_reg=%d errno=%d\n", bad != NULL, errno);
	printf("hsa_queries=%ld cuda_queries=%ld\n", hsa_double_pointer_queries(), cuda_double_pointer_queries());
	print_counters();
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	if (strcmp(mode, "gpu-write") == 0 && argc == 5)
		gpu_write(argv[2], argv[3], (size_t)atol(argv[4]));
	else if (strcmp(mode, "leak") == 0 && argc == 4)
		leak(argv[2], atoi(argv[3]));
	else if (strcmp(mode, "threads") == 0 && argc == 5)
		threads(argv[2], atoi(argv[3]), atoi(argv[4]));
	else if (strcmp(mode, "host") == 0 && argc == 3)
		host(atoi(argv[2]));
	else
		DIE("usage: reg_app gpu-write hsa|cuda const|var|iova DELTA | leak B N | threads B T N | host N");
	return 0;
}
