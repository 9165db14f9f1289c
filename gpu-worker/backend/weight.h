/*
 * weight.h - a tensor as every backend's decoder sees it (docs/adr/0045):
 * where its bytes are (device memory, a cache slot, or the file's mapping
 * read in place) and their type (model/quant.h's ids, the GGUF numbers).
 * The neutral half (the expert cache, the decoder's tensor table) hands
 * these to a backend's layer operations; what a backend does with the bytes
 * is its own.
 */
#ifndef IGNIS_GPU_WORKER_WEIGHT_H
#define IGNIS_GPU_WORKER_WEIGHT_H

#include <stdint.h>

struct be_weight {
	const void *p;
	uint32_t type; /* enum quant_type_id (model/quant.h) */
};

#endif
