/* A verbs program with no GPU runtime at all: under the shim every registration must pass through. */
#include <errno.h>
#include <dlfcn.h>
#include <stdint.h>

#include "loopback.h"

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	struct loopback lb;
	lb_open(&lb);
	static uint8_t buf[1 << 16];
	int ok = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_mr *mr = ibv_reg_mr(lb.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		if (mr != NULL && mr->addr == buf) {
			ok++;
			ibv_dereg_mr(mr);
		}
	}
	int (*read)(uint64_t *, int) = (int (*)(uint64_t *, int))dlsym(RTLD_DEFAULT, "dmabuf_shim_counters");
	uint64_t c[5] = { 0 };
	if (read != NULL)
		read(c, 5);
	printf("ok=%d shim_loaded=%d registrations=%llu dmabuf=%llu passthrough=%llu\n", ok, read != NULL,
	       (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2]);
	return 0;
}
