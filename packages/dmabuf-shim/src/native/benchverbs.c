/* Stand-in registration functions for `dmabuf-shim bench`: they return at once, so timing the
 * shim's entry point against a direct call measures only what the shim adds. Never a verbs provider. */
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

static char fake_mr[64];

EXPORT void *ibv_reg_mr(void *pd, void *addr, size_t length, int access)
{
	(void)pd, (void)addr, (void)length, (void)access;
	return fake_mr;
}

EXPORT void *ibv_reg_mr_iova(void *pd, void *addr, size_t length, uint64_t iova, int access)
{
	(void)pd, (void)addr, (void)length, (void)iova, (void)access;
	return fake_mr;
}

EXPORT void *ibv_reg_mr_iova2(void *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	(void)pd, (void)addr, (void)length, (void)iova, (void)access;
	return fake_mr;
}
