/* Exercises the test doubles directly (no shim) and prints key=value facts for pytest. */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_min.h"
#include "gpu_double.h"
#include "hsa_min.h"
#include "loopback.h"

#define MiB (1024ull * 1024ull)

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

static uint8_t *hsa_vram(size_t size)
{
	hsa_agent_t gpu = { 0 };
	hsa_amd_memory_pool_t pool = { 0 };
	void *p = NULL;
	if (hsa_init() != HSA_STATUS_SUCCESS)
		DIE("hsa_init");
	hsa_iterate_agents(find_gpu, &gpu);
	hsa_amd_agent_iterate_memory_pools(gpu, first_pool, &pool);
	if (hsa_amd_memory_pool_allocate(pool, size, 0, &p) != HSA_STATUS_SUCCESS)
		DIE("pool_allocate");
	return p;
}

static long fd_size(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 ? (long)st.st_size : -1;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	if (strcmp(mode, "hsa-export") == 0) {
		uint8_t *pool = hsa_vram(64 * MiB);
		int fd = -1;
		uint64_t off = 0;
		int st = hsa_amd_portable_export_dmabuf(pool + 32 * MiB + 100, 1 * MiB, &fd, &off);
		printf("status=%d fd_size=%ld offset=%llu open=%d\n", st, fd_size(fd), (unsigned long long)off,
		       hsa_double_open_exports());
		st = hsa_amd_portable_close_dmabuf(fd);
		printf("close=%d open_after_close=%d\n", st, hsa_double_open_exports());
		char host[64];
		st = hsa_amd_portable_export_dmabuf(host, sizeof(host), &fd, &off);
		printf("host_status=%d\n", st);
		st = hsa_amd_portable_export_dmabuf(pool + 63 * MiB, 2 * MiB, &fd, &off);
		printf("overrun_status=%d\n", st);
		hsa_amd_pointer_info_t info = { .size = sizeof(info) };
		hsa_amd_pointer_info(pool + 5, &info, NULL, NULL, NULL);
		printf("info_type=%d info_base_delta=%lld info_size=%zu\n", info.type,
		       (long long)((uint8_t *)info.agentBaseAddress - pool), info.sizeInBytes);
		hsa_amd_pointer_info(host, &info, NULL, NULL, NULL);
		printf("host_info_type=%d\n", info.type);
		static char page[8192];
		hsa_agent_t gpu = { 0 };
		hsa_iterate_agents(find_gpu, &gpu);
		void *agent_ptr = NULL;
		printf("copy_unlocked=%d\n", hsa_memory_copy(pool, page, 4096));
		int lk = hsa_amd_memory_lock(page, sizeof(page), &gpu, 1, &agent_ptr);
		hsa_amd_pointer_info(page, &info, NULL, NULL, NULL);
		memset(page, 0x42, sizeof(page));
		int cp = hsa_memory_copy(pool + 4096, agent_ptr, sizeof(page));
		int unlock = hsa_amd_memory_unlock(page);
		int unlock_again = hsa_amd_memory_unlock(page);
		printf("lock=%d locked_type=%d copy=%d copied=%d unlock=%d unlock_again=%d\n", lk, info.type, cp,
		       pool[4096] == 0x42 && pool[4096 + 8191] == 0x42, unlock, unlock_again);
		const char *text = NULL;
		printf("status_string=%d\n", hsa_status_string(HSA_STATUS_ERROR_INVALID_ALLOCATION, &text) == 0 && text);
		return 0;
	}
	if (strcmp(mode, "cuda-export") == 0) {
		CUdeviceptr base = 0;
		int fd = -1;
		printf("before_init=%d\n", cuPointerGetAttribute(&fd, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0));
		cuInit(0);
		printf("no_context=%d\n", cuMemAlloc(&base, 64 * MiB));
		CUcontext ctx = NULL;
		if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
			DIE("CUDA context");
		if (cuMemAlloc(&base, 64 * MiB) != CUDA_SUCCESS)
			DIE("cuMemAlloc");
		static char back[4096];
		memset(back, 0x77, sizeof(back));
		int up = cuMemcpyHtoD(base + 4096, back, sizeof(back));
		memset(back, 0, sizeof(back));
		int down = cuMemcpyDtoH(back, base + 4096, sizeof(back));
		int beyond = cuMemcpyDtoH(back, base + 64 * MiB - 100, sizeof(back));
		printf("htod=%d dtoh=%d copied=%d beyond=%d\n", up, down, back[0] == 0x77 && back[4095] == 0x77, beyond);
		int st = cuMemGetHandleForAddressRange(&fd, base + 32 * MiB, 1 * MiB, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
		printf("status=%d fd_size=%ld open=%d\n", st, fd_size(fd), cuda_double_open_exports());
		close(fd);
		st = cuMemGetHandleForAddressRange(&fd, base + 32 * MiB + 100, 1 * MiB, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
						   0);
		printf("unaligned_status=%d open_after=%d\n", st, cuda_double_open_exports());
		unsigned int type = 0;
		st = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base + 7);
		char host[8];
		int hst = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host);
		printf("memtype_status=%d memtype=%u host_status=%d\n", st, type, hst);
		return 0;
	}
	struct loopback lb;
	lb_open(&lb);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (strcmp(mode, "plain-vram") == 0) {
		uint8_t *pool = hsa_vram(2 * MiB);
		errno = 0;
		struct ibv_mr *mr = ibv_reg_mr(lb.pd, pool, 4096, access);
		printf("vram_mr=%d errno=%d\n", mr != NULL, errno);
		static char host[8192];
		mr = ibv_reg_mr(lb.pd, host, sizeof(host), access);
		printf("host_mr=%d\n", mr != NULL);
		errno = 0;
		mr = ibv_reg_dmabuf_mr(lb.pd, 0, 4096, 0, -1, access);
		printf("badfd_mr=%d badfd_errno=%d\n", mr != NULL, errno);
		return 0;
	}
	if (strcmp(mode, "write") == 0 || strcmp(mode, "write-bug") == 0) {
		/* mori#509: 1 MiB sub-allocation at 32 MiB of a 64 MiB pool, sentinel at the base */
		uint8_t *pool = hsa_vram(64 * MiB);
		uint8_t *sub = pool + 32 * MiB;
		memset(pool, 0xAB, 4096);
		memset(sub, 0, MiB);
		int fd = -1;
		uint64_t off = 0;
		if (hsa_amd_portable_export_dmabuf(sub, MiB, &fd, &off) != HSA_STATUS_SUCCESS)
			DIE("export");
		uint64_t use = strcmp(mode, "write") == 0 ? off : 0;
		struct ibv_mr *dst = ibv_reg_dmabuf_mr(lb.pd, use, MiB, (uint64_t)(uintptr_t)sub, fd, access);
		if (dst == NULL)
			DIE("reg_dmabuf_mr errno=%d", errno);
		hsa_amd_portable_close_dmabuf(fd); /* the MR must outlive the fd */
		static uint8_t src[1 << 20];
		memset(src, 0x5C, sizeof(src));
		struct ibv_mr *smr = ibv_reg_mr(lb.pd, src, sizeof(src), access);
		int st = lb_rdma(&lb, IBV_WR_RDMA_WRITE, smr, src, MiB, (uint64_t)(uintptr_t)sub, dst->rkey);
		int landed = sub[0] == 0x5C && sub[MiB - 1] == 0x5C;
		int sentinel = pool[0] == 0xAB && pool[4095] == 0xAB;
		printf("wc_status=%d landed=%d sentinel_intact=%d mr_addr=%llu\n", st, landed, sentinel,
		       (unsigned long long)(uintptr_t)dst->addr);
		memset(src, 0, sizeof(src));
		st = lb_rdma(&lb, IBV_WR_RDMA_READ, smr, src, 4096, (uint64_t)(uintptr_t)sub, dst->rkey);
		printf("read_status=%d read_ok=%d\n", st, src[0] == sub[0] && src[4095] == sub[4095]);
		st = lb_rdma(&lb, IBV_WR_RDMA_WRITE, smr, src, 4096, (uint64_t)(uintptr_t)sub + MiB - 100, dst->rkey);
		printf("overrun_status=%d\n", st);
		return 0;
	}
	DIE("unknown mode %s", mode);
}
