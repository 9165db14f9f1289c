/* devprobe.c - free device memory through NVML, loaded at run time (see devprobe.h). */
#include "devprobe.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few NVML declarations we use (nvml.h is not installed with the
 * toolkit here; these are NVML's stable C ABI). */
typedef int nvml_return;
typedef struct nvml_device *nvml_device;
struct nvml_memory {
	unsigned long long total, free, used;
};

int devprobe_free_bytes(unsigned index, uint64_t *free_bytes, char *name, size_t cap,
                        struct ig_errbuf *eb)
{
	nvml_return (*init)(void), (*shutdown)(void);
	nvml_return (*by_index)(unsigned, nvml_device *);
	nvml_return (*by_uuid)(const char *, nvml_device *);
	nvml_return (*mem_info)(nvml_device, struct nvml_memory *);
	nvml_return (*get_name)(nvml_device, char *, unsigned);
	const char *(*err_str)(nvml_return);
	struct nvml_memory mem;
	nvml_device dev;
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	nvml_return r;
	int rc = IG_E_OK;

	if (!lib)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "no NVIDIA driver here (libnvidia-ml.so.1: %s); plan with "
		               "--device-free-bytes or the cpu backend",
		               dlerror());
	*(void **)&init = dlsym(lib, "nvmlInit_v2");
	*(void **)&shutdown = dlsym(lib, "nvmlShutdown");
	*(void **)&by_index = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&by_uuid = dlsym(lib, "nvmlDeviceGetHandleByUUID");
	*(void **)&mem_info = dlsym(lib, "nvmlDeviceGetMemoryInfo");
	*(void **)&get_name = dlsym(lib, "nvmlDeviceGetName");
	*(void **)&err_str = dlsym(lib, "nvmlErrorString");
	if (!init || !shutdown || !by_index || !by_uuid || !mem_info || !get_name || !err_str) {
		dlclose(lib);
		return ig_errf(eb, IG_E_NOTFOUND, "libnvidia-ml.so.1 lacks the NVML calls we use");
	}
	r = init();
	if (r != 0) {
		rc = ig_errf(eb, IG_E_NOTFOUND, "NVML did not start: %s", err_str(r));
		goto out_close;
	}
	/* The card CUDA will use: the first of CUDA_VISIBLE_DEVICES, by UUID
	 * (GPU-... or MIG-...) or by index (the supervisor exports
	 * CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA's order is NVML's). */
	{
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		char first[96];

		if (vis && *vis) {
			snprintf(first, sizeof(first), "%.*s", (int)strcspn(vis, ","), vis);
			if (!strncmp(first, "GPU-", 4) || !strncmp(first, "MIG-", 4))
				r = by_uuid(first, &dev);
			else
				r = by_index((unsigned)strtoul(first, NULL, 10), &dev);
		} else {
			r = by_index(index, &dev);
		}
	}
	if (r == 0)
		r = mem_info(dev, &mem);
	if (r != 0) {
		rc = ig_errf(eb, IG_E_NOTFOUND, "no memory figure for device %u: %s", index,
		             err_str(r));
		goto out_shutdown;
	}
	*free_bytes = mem.free;
	if (get_name(dev, name, (unsigned)cap) != 0)
		snprintf(name, cap, "device %u", index);
out_shutdown:
	shutdown();
out_close:
	dlclose(lib);
	return rc;
}
