/* Loads a verbs program built as a plugin with dlopen(RTLD_LOCAL), as UCX loads its IB module:
 * libibverbs then sits outside the global scope, where dlsym(RTLD_NEXT) cannot see it. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: plugin_loader PLUGIN ARGS...\n");
		return 2;
	}
	void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (plugin == NULL) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 2;
	}
	int (*run)(int, char **) = (int (*)(int, char **))dlsym(plugin, "reg_app_main");
	if (run == NULL) {
		fprintf(stderr, "reg_app_main not found\n");
		return 2;
	}
	return run(argc - 1, argv + 1);
}
